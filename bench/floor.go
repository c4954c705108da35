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
	)
	m := startMeter(o.BaseURL)
	for range o.Agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := floorAgent(ctx, u.Host, req, o.Rounds)
			calls.Add(int64(n))
			if err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	m.stop()
	if first != nil {
		return Throughput{}, fmt.Errorf("floor bench: %w", first)
	}
	t := Throughput{Agents: o.Agents, Rounds: o.Rounds, Calls: int(calls.Load()),
		Ideal: time.Duration(o.Rounds) * o.Service}
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

// floorAgent makes rounds calls on one connection and returns how many
// were answered.
func floorAgent(ctx context.Context, addr string, req []byte, rounds int) (int, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range rounds {
		if _, err := c.Write(req); err != nil {
			return i, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return i, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return i, err
		}
		if resp.StatusCode != http.StatusOK {
			return i, fmt.Errorf("%s answered %s", addr, resp.Status)
		}
	}
	return rounds, nil
}
