package server

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
)

// TestWSEventRightAfterHandshake: an event published as soon as the
// websocket handshake is answered reaches the client. The daemon answered
// the handshake before it subscribed the client, so an event published in
// between was lost for it.
func TestWSEventRightAfterHandshake(t *testing.T) {
	s := New(Options{Registry: prometheus.NewRegistry()})
	srv := httptest.NewServer(http.HandlerFunc(s.serveWS))
	defer srv.Close()
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "?run=r"
	for i := range 200 {
		conn, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		s.hub.publish(orchestrator.Event{Type: orchestrator.EventStepStarted, Run: "r", Step: i})
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var e orchestrator.Event
		if err := conn.ReadJSON(&e); err != nil {
			t.Fatalf("connection %d: the event published right after the handshake was not delivered: %v", i, err)
		}
		if got, want := e.Step, i; got != want {
			t.Fatalf("connection %d: got step %d, want %d", i, got, want)
		}
		conn.Close()
		// Wait for the handler to unsubscribe, so the next connection
		// alone can take the event.
		if !testutil.Eventually(func() bool { return s.hub.len() == 0 }) {
			t.Fatalf("connection %d: the closed connection is still subscribed after %s (%d subscribers)", i, testutil.Patience, s.hub.len())
		}
	}
}

// TestWSClosingDaemon: a stream opened while the daemon closes is
// answered, then closed with 1001 and the reason.
func TestWSClosingDaemon(t *testing.T) {
	s := New(Options{Registry: prometheus.NewRegistry()})
	srv := httptest.NewServer(http.HandlerFunc(s.serveWS))
	defer srv.Close()
	s.hub.close()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || ce.Text != reasonShutdown {
		t.Fatalf("read: %v, want close 1001 %q", err, reasonShutdown)
	}
}
