package server_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/grpo-dev/grpo/server"
)

// TestDashboardRunsListFromEvents: a committed step or a new best step
// moves its run's row in the list at once, and the page does not read the
// whole list again for it (with thousands of runs that read was the
// daemon's heaviest answer, asked at every step). Timers run at once in
// the page here, so a reload the page would schedule shows as a fetch.
func TestDashboardRunsListFromEvents(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "one")
	storeRun(t, e.store, t.TempDir(), "two")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=one", 1280, 900)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
	  let lists = 0;
	  const fetch0 = window.fetch;
	  window.fetch = (path, opts) => { if (String(path).split("?")[0] === "/api/v1/runs") lists++; return fetch0(path, opts); };
	  window.setTimeout = (f) => { f(); return 0; };
	  const at = new Date().toISOString();
	  onEvent({type: "step_committed", run: "two", step: 7, time: at, data: {step: 7, n: 5}});
	  onEvent({type: "best_changed", run: "two", step: 7, time: at, data: {policy: "best-validation", step: 5, value: 0.5, scored: true}});
	  onEvent({type: "step_committed", run: "one", step: 3, time: at, data: {step: 3, n: 5}});
	  const cells = (run) => [...document.querySelector('#runs tbody tr[data-run="' + run + '"]').children].slice(2, 4).map((c) => c.textContent).join(",");
	  return lists + "|" + cells("two") + "|" + cells("one");
	})()`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	parts := strings.Split(got, "|")
	if len(parts) != 3 || parts[0] != "0" || parts[1] != "7,5" || parts[2] != "3,2" {
		t.Fatalf("list reads, run two's steps and best, run one's = %q, want 0 reads, 7,5 and 3,2", got)
	}
}
