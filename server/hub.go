package server

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/grpo-dev/grpo/orchestrator"
)

// hub fans run events out to websocket clients. Publishing never blocks:
// a client whose bounded queue is full is dropped, so a slow reader cannot
// hold up a run.
type hub struct {
	buf     int
	max     int // clients at once
	mu      sync.Mutex
	clients map[*client]struct{}
	closed  bool
}

// client is one subscriber. send carries encoded events; gone is closed
// when the hub drops the client, and reason says why.
type client struct {
	run    string // "" = every run
	send   chan []byte
	gone   chan struct{}
	reason string
}

// Reasons a client is dropped, sent in the websocket close frame.
const (
	reasonSlow     = "client too slow: event queue full"
	reasonShutdown = "daemon shutting down"
)

func newHub(buf, max int) *hub {
	return &hub{buf: buf, max: max, clients: make(map[*client]struct{})}
}

// Why subscribe refused a client.
var (
	errHubClosed = errors.New("hub closed")
	errHubFull   = errors.New("hub full")
)

// subscribe adds a client for run's events ("" = all runs). It fails with
// errHubClosed once the hub is closed, errHubFull when it has as many
// clients as it takes.
func (h *hub) subscribe(run string) (*client, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, errHubClosed
	}
	if len(h.clients) >= h.max {
		return nil, errHubFull
	}
	c := &client{run: run, send: make(chan []byte, h.buf), gone: make(chan struct{})}
	h.clients[c] = struct{}{}
	return c, nil
}

// unsubscribe removes a client; safe after the hub dropped it.
func (h *hub) unsubscribe(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.clients, c)
}

// drop removes c and tells its writer why. Called with h.mu held.
func (h *hub) drop(c *client, reason string) {
	delete(h.clients, c)
	c.reason = reason
	close(c.gone)
}

// publish sends e to every client that wants it, dropping those whose
// queue is full.
func (h *hub) publish(e orchestrator.Event) {
	b, err := json.Marshal(e)
	if err != nil {
		// Payloads are plain structs (orchestrator/events.go); this would be a
		// programming error: send the envelope alone.
		b, _ = json.Marshal(orchestrator.Event{Type: e.Type, Run: e.Run, Step: e.Step, Time: e.Time})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		if c.run != "" && c.run != e.Run {
			continue
		}
		select {
		case c.send <- b:
		default:
			h.drop(c, reasonSlow)
		}
	}
}

// close drops every client and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for c := range h.clients {
		h.drop(c, reasonShutdown)
	}
}

// len returns the number of clients.
func (h *hub) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}
