package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// floorRequestBytes is the body size of the floor's requests: the mean of
// what grpo sends in the bench's episodes (2.6 KB in round 1 to 5.1 KB in
// round 5, counted with strace).
const floorRequestBytes = 3800

// MeasureFloor measures what the rollout measurement costs a client that
// does nothing but HTTP: Agents connections at once, each making Rounds
// calls in turn to the same server with requests of grpo's mean size, by
// the least a Go HTTP/1.1 client does — a connection from net.Dialer, one
// write of a prepared request and http.ReadResponse on the caller's
// goroutine, the body read and dropped. No JSON, no episodes, no retries
// or deadlines: what the rollout row costs over it is grpo's own work,
// and what it costs is this machine's.
func MeasureFloor(ctx context.Context, o RolloutOptions) (Throughput, error) {
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	u, err := url.Parse(o.BaseURL)
	if err != nil || u.Host == "" {
		return Throughput{}, fmt.Errorf("floor bench: base URL %q: want http://host:port/v1", o.BaseURL)
	}
	req := floorRequest(u)
	var (
		wg    sync.WaitGroup
		calls atomic.Int64
		first error
		once  sync.Once
		gate  *floorGate
	)
	var m *meter
	if o.Warm {
		gate = &floorGate{start: make(chan struct{})}
		gate.ready.Add(o.Agents)
	} else {
		m = startMeter(o.BaseURL)
	}
	for range o.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := floorAgent(ctx, u.Host, req, o.Rounds, gate)
			calls.Add(int64(n))
			if err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	if gate != nil {
		gate.ready.Wait()
		m = startMeter(o.BaseURL)
		close(gate.start)
	}
	wg.Wait()
	m.stop()
	if first != nil {
		return Throughput{}, fmt.Errorf("floor bench: %w", first)
	}
	t := Throughput{Agents: o.Agents, Rounds: o.Rounds, Calls: int(calls.Load()),
		Ideal: time.Duration(o.Rounds) * o.Service, Warm: o.Warm}
	m.fill(&t)
	return t, nil
}

// floorRequest is a chat completion request of floorRequestBytes, head
// included, written as it goes on the wire.
func floorRequest(u *url.URL) []byte {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"`)
	tail := `"}],"temperature":1}`
	body = append(body, bytes.Repeat([]byte("x"), max(0, floorRequestBytes-len(body)-len(tail)))...)
	body = append(body, tail...)
	head := fmt.Sprintf("POST %s/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		u.Path, u.Host, len(body))
	return append([]byte(head), body...)
}

// floorGate holds the agents of a warm measurement after their
// untimed first call until start is closed.
type floorGate struct {
	ready sync.WaitGroup // one Done per agent, after its first call
	start chan struct{}
}

// floorAgent makes rounds calls on one connection and returns how many
// were answered. With a gate, it first makes one call that is not
// counted, says so, and waits for the start.
func floorAgent(ctx context.Context, addr string, req []byte, rounds int, gate *floorGate) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		if gate != nil {
			gate.ready.Done()
		}
		return 0, err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if gate != nil {
		err := floorCall(c, br, addr, req)
		gate.ready.Done()
		if err != nil {
			return 0, err
		}
		select {
		case <-gate.start:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	for i := range rounds {
		if err := floorCall(c, br, addr, req); err != nil {
			return i, err
		}
	}
	return rounds, nil
}

// floorCall writes req on c and reads its answer to the end.
func floorCall(c net.Conn, br *bufio.Reader, addr string, req []byte) error {
	if _, err := c.Write(req); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", addr, resp.Status)
	}
	return nil
}
