package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/grpo-dev/grpo/server"
)

// TestDashboardShowsEndpointsDown: an endpoint_state event of the run
// shown says which inference endpoint is down, since when, why and how
// often it is probed from when, until it is readmitted; a run whose only
// endpoint is down otherwise shows nothing but a progress line that
// stopped. The page showed "next probe at TIME", TIME the first probe's:
// the failed probes after it send no event, so the time went stale.
func TestDashboardShowsEndpointsDown(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	const script = `(() => {
	  const ev = (step, data) => onEvent({type: "endpoint_state", run: "done", step, time: "2026-12-01T20:15:03Z", data});
	  const el = document.querySelector("#endpoints");
	  const out = [];
	  ev(3, {endpoint: "http://127.0.0.1:8000/v1", up: false, error: "connection refused", probe_in_seconds: 2, probe_every_seconds: 2});
	  ev(3, {endpoint: "http://127.0.0.1:8001/v1", up: false, error: "503 Service Unavailable", probe_in_seconds: 4, probe_every_seconds: 0.5});
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
	// The first probes are due 2 s and 4 s after the events' 20:15:03 UTC,
	// in the browser's time zone.
	probe := func(sec int) string {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`new Date("2026-12-01T20:15:%02dZ").toLocaleTimeString()`, sec)))
		if err != nil {
			t.Fatalf("chromium: %v", err)
		}
		return s
	}
	for _, want := range []string{"false inference endpoint http://127.0.0.1:8000/v1 down since ", ": connection refused (probed every 2 s from " + probe(5) + ")", "http://127.0.0.1:8001/v1 down since", "503 Service Unavailable (probed every 0.5 s from " + probe(7) + ")"} {
		if !strings.Contains(parts[0], want) {
			t.Errorf("two endpoints down: %q, want it to contain %q", parts[0], want)
		}
	}
	if strings.Contains(parts[0], "next probe") {
		t.Errorf("two endpoints down: %q tells a next probe: no event tells it after the first", parts[0])
	}
	if strings.Contains(parts[1], "8000") || !strings.Contains(parts[1], "8001") || !strings.HasPrefix(parts[1], "false ") {
		t.Errorf("after 8000 was readmitted: %q, want 8001 alone", parts[1])
	}
	if parts[2] != "true " {
		t.Errorf("after both were readmitted (another run's endpoint down meanwhile): %q, want the line hidden and empty", parts[2])
	}
}

// TestDashboardEndpointsAfterReconnect: the list of endpoints down was
// built from endpoint_state events alone, so a readmission sent while the
// page's websocket reconnected left the endpoint listed down until the run
// ended (and a page opened during an outage listed nothing). The page
// reads the endpoints down with the run (GET /api/v1/runs/{id}), on load
// and again when the websocket reconnects.
func TestDashboardEndpointsAfterReconnect(t *testing.T) {
	o := startOutage(t)
	o.endpointsDown(t, 1)
	ctx := openDashboard(t, o.s.URL()+"/?run=outage", 1280, 900)
	const text = `document.querySelector("#endpoints").textContent`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](text+`.includes("inference endpoint `+o.dead+` down since ")`)); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](text))
		t.Fatalf("page opened during the outage lists %q, want %s down: %v", got, o.dead, err)
	}
	// An endpoint the page saw drained, whose readmission it misses: the
	// websocket closes, and reconnects two seconds later.
	const stale = "http://127.0.0.1:1/v1"
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
	  onEvent({type: "endpoint_state", run: "outage", step: 1, time: new Date().toISOString(), data: {endpoint: "`+stale+`", up: false, error: "connection refused", probe_in_seconds: 2}});
	  state.ws.close();
	  return true;
	})()`)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](text)); err != nil || !strings.Contains(got, stale) {
		t.Fatalf("before the reconnection the page lists %q (%v), want %s too", got, err, stale)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#live").textContent === "offline"`)); err != nil {
		t.Fatalf("chromium: the websocket did not close: %v", err)
	}
	cond := `document.querySelector("#live").textContent === "live" && !` + text + `.includes("` + stale + `") && ` + text + `.includes("` + o.dead + `")`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond)); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#live").textContent + ": " + `+text))
		t.Fatalf("after the websocket reconnected the page shows %q, want %s alone down: %v", got, o.dead, err)
	}
}
