package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardChartTextSize: the charts scaled a drawing 640 wide to
// their box, so on a phone (390 px) their text was 5 px high. They are
// drawn at their width: every label is at least 10 px high on the screen,
// within its chart, at desktop and phone widths, and after the window
// changes from one to the other.
func TestDashboardChartTextSize(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	// The smallest label's height on the screen (its font size in the
	// drawing times the drawing's scale), and how far a label sticks out
	// of its chart.
	const measure = `JSON.stringify((() => {
	  let least = Infinity, out = 0, labels = 0, which = "";
	  for (const svg of document.querySelectorAll("svg.chart")) {
	    const box = svg.getBoundingClientRect(), scale = svg.getScreenCTM().a;
	    for (const t of svg.querySelectorAll("text")) {
	      labels++;
	      least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
	      const r = t.getBoundingClientRect();
	      out = Math.max(out, box.left - r.left, r.right - box.right);
	      if (Math.max(box.left - r.left, r.right - box.right) > 1) which = svg.id + " " + JSON.stringify(t.textContent);
	    }
	  }
	  return {least, out, which, labels, width: document.querySelector("#curve").getBoundingClientRect().width};
	})())`
	type sizes struct {
		Least, Out, Width float64
		Labels            int
		Which             string
	}
	get := func() sizes {
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](measure))
		if err != nil {
			t.Fatalf("chromium: measure: %v", err)
		}
		var m sizes
		if err := json.Unmarshal([]byte(got), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#curve circle.pt.val").length === 3`)); err != nil {
		t.Fatalf("chromium: the reward chart: %v", err)
	}
	for _, width := range []int64{1280, 390, 1280} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatalf("chromium: viewport %d: %v", width, err)
		}
		// The charts are drawn again 100 ms after the window changed.
		const drawn = `Math.abs(document.querySelector("#curve").viewBox.baseVal.width - document.querySelector("#curve").getBoundingClientRect().width) < 4`
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](drawn, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			m := get()
			t.Errorf("%d px wide: the reward chart, %v px wide, is not drawn at its width: %v", width, m.Width, err)
		}
		m := get()
		if m.Labels == 0 || m.Least < 10 {
			t.Errorf("%d px wide: the smallest of %d chart labels is %.1f px high on the screen, want at least 10", width, m.Labels, m.Least)
		}
		if m.Out > 1 {
			t.Errorf("%d px wide: a chart label (%s) sticks out of its chart by %.1f px", width, m.Which, m.Out)
		}
	}
}
