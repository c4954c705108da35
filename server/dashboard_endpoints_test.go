package server_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/grpo-dev/grpo/server"
)

// TestDashboardShowsEndpointsDown: an endpoint_state event of the run
// shown says which inference endpoint is down, since when, why and when
// it is probed again, until it is readmitted; a run whose only endpoint is
// down otherwise shows nothing but a progress line that stopped.
func TestDashboardShowsEndpointsDown(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	const script = `(() => {
	  const ev = (step, data) => onEvent({type: "endpoint_state", run: "done", step, time: "2026-12-01T20:15:03Z", data});
	  const el = document.querySelector("#endpoints");
	  const out = [];
	  ev(3, {endpoint: "http://127.0.0.1:8000/v1", up: false, error: "connection refused", probe_in_seconds: 2});
	  ev(3, {endpoint: "http://127.0.0.1:8001/v1", up: false, error: "503 Service Unavailable", probe_in_seconds: 4});
	  out.push(el.hidden + " " + el.textContent);
	  ev(4, {endpoint: "http://127.0.0.1:8000/v1", up: true});
	  out.push(el.hidden + " " + el.textContent);
	  onEvent({type: "endpoint_state", run: "other", step: 1, time: "2026-12-01T20:15:03Z", data: {endpoint: "http://x/v1", up: false, error: "e"}});
	  ev(4, {endpoint: "http://127.0.0.1:8001/v1", up: true});
	  out.push(el.hidden + " " + el.textContent);
	  return out.join("|");
	})()`
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](script))
	if err != nil {
		t.Fatalf("chromium: feed the events: %v", err)
	}
	parts := strings.Split(got, "|")
	if len(parts) != 3 {
		t.Fatalf("got %q", got)
	}
	for _, want := range []string{"false inference endpoint http://127.0.0.1:8000/v1 down since ", ": connection refused (next probe at ", "http://127.0.0.1:8001/v1 down since", "503 Service Unavailable (next probe at "} {
		if !strings.Contains(parts[0], want) {
			t.Errorf("two endpoints down: %q, want it to contain %q", parts[0], want)
		}
	}
	if strings.Contains(parts[1], "8000") || !strings.Contains(parts[1], "8001") || !strings.HasPrefix(parts[1], "false ") {
		t.Errorf("after 8000 was readmitted: %q, want 8001 alone", parts[1])
	}
	if parts[2] != "true " {
		t.Errorf("after both were readmitted (another run's endpoint down meanwhile): %q, want the line hidden and empty", parts[2])
	}
}
