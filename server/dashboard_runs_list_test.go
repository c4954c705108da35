package server_test

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardRunsListFits: the runs list's last column, "compare", was
// cut in half on a desktop screen: the table was wider than the runs
// column, and the run's pane covered what stuck out. Every cell must lie
// within the column, a long run name (an experiment's
// <experiment>/<arm>/<seed>) wrapping, at desktop and phone widths.
func TestDashboardRunsListFits(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "stopped")
	storeRun(t, e.store, t.TempDir(), "reward-shaping-ablation/no-fairness-term/3")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=stopped", 1280, 900)
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatalf("chromium: viewport %d: %v", width, err)
		}
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify((() => {
		  const aside = document.querySelector("aside").getBoundingClientRect();
		  const cells = [...document.querySelectorAll("#runs th, #runs td")].map((c) => c.getBoundingClientRect());
		  return {aside: [aside.left, aside.right], left: Math.min(...cells.map((r) => r.left)), right: Math.max(...cells.map((r) => r.right)),
		    compare: document.querySelector("#runs th:last-child").getBoundingClientRect().right,
		    lines: document.querySelector('#runs tr[data-run="stopped"] a').getClientRects().length};
		})())`))
		if err != nil {
			t.Fatalf("chromium: measure: %v", err)
		}
		var m struct {
			Aside                [2]float64
			Left, Right, Compare float64
			Lines                int
		}
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatal(err)
		}
		if m.Left < m.Aside[0] || m.Right > m.Aside[1] {
			t.Errorf("%d px wide: the runs table spans %v to %v px (its \"compare\" heading ends at %v), the runs column %v to %v", width, m.Left, m.Right, m.Compare, m.Aside[0], m.Aside[1])
		}
		if m.Lines != 1 {
			t.Errorf("%d px wide: the run name \"stopped\" takes %d lines", width, m.Lines)
		}
	}
}
