package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/server"
)

func dialWS(t *testing.T, base, query string, h http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	return websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws"+query, h)
}

func TestWebsocketFilter(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	conn, _, err := dialWS(t, base, "?run=alpha", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	all, _, err := dialWS(t, base, "", http.Header{"Origin": {base}})
	if err != nil {
		t.Fatalf("dial with same-host origin: %v", err)
	}
	defer all.Close()

	launch(t, base, "", smallRun("beta", 1))
	launch(t, base, "", smallRun("alpha", 1))

	seen := map[string]int{}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	for seen[orchestrator.EventRunFinished] == 0 {
		var ev orchestrator.Event
		if err := conn.ReadJSON(&ev); err != nil {
			t.Fatalf("read: %v (seen %v)", err, seen)
		}
		if ev.Run != "alpha" {
			t.Fatalf("filtered stream got an event of run %q: %+v", ev.Run, ev)
		}
		seen[ev.Type]++
	}
	for typ, want := range map[string]int{
		orchestrator.EventRunStarted: 1, orchestrator.EventStepStarted: 2, orchestrator.EventStepCommitted: 2,
		orchestrator.EventValidationDone: 2, orchestrator.EventEpisodeFinished: 6 + 2*4,
		orchestrator.EventAdapterLoaded: 1, orchestrator.EventRunFinished: 1,
	} {
		if got := seen[typ]; got != want {
			t.Errorf("%s events=%d, want %d", typ, got, want)
		}
	}
	if seen[orchestrator.EventJobState] < 1 || seen[orchestrator.EventBestChanged] < 1 {
		t.Errorf("seen %v: want job_state and best_changed", seen)
	}

	// The unfiltered stream carries both runs.
	runs := map[string]bool{}
	all.SetReadDeadline(time.Now().Add(time.Minute))
	for !(runs["alpha"] && runs["beta"]) {
		var ev orchestrator.Event
		if err := all.ReadJSON(&ev); err != nil {
			t.Fatalf("read all: %v", err)
		}
		runs[ev.Run] = true
	}
}

func TestWebsocketOrigin(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{AllowedOrigins: []string{"http://grafana.example:3000"}})
	_, resp, err := dialWS(t, s.URL(), "", http.Header{"Origin": {"http://evil.example"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: err %v, resp %v; want 403", err, resp)
	}
	c, _, err := dialWS(t, s.URL(), "", http.Header{"Origin": {"http://grafana.example:3000"}})
	if err != nil {
		t.Fatalf("allowed origin: %v", err)
	}
	c.Close()
}

func TestWebsocketClosedOnShutdown(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	c, _, err := dialWS(t, s.URL(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = c.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("read after Close: %v, want close 1001", err)
	}
	<-done
}

// TestWSStreamsAreBounded: past MaxStreams open streams a new one is
// refused with 503 (3,000 clients that never read were all accepted, each
// holding a connection and a queue of events); one that closes frees its
// place.
func TestWSStreamsAreBounded(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{MaxStreams: 2})
	url := "ws" + strings.TrimPrefix(s.URL(), "http") + "/ws"
	var open []*websocket.Conn
	for range 2 {
		c, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	// The daemon subscribes a stream before it answers the handshake:
	// the two count once dialled.
	c, resp, err := websocket.DefaultDialer.Dial(url, nil)
	if err == nil {
		c.Close()
		t.Fatal("a third stream was accepted beyond MaxStreams 2")
	}
	if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("third stream: %v, want 503", resp)
	}
	open[0].Close()
	accepted := testutil.Eventually(func() bool {
		c, _, err = websocket.DefaultDialer.Dial(url, nil)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if !accepted {
		t.Fatalf("no stream accepted within %s after one closed: %v", testutil.Patience, err)
	}
	open[1].Close()
}
