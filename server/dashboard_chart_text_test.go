package server_test

import (
	"context"
	"encoding/json"
	"slices"
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
	get := func() chartSizes { return measureCharts(ctx, t) }
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#curve circle.pt.val").length === 3`)); err != nil {
		t.Fatalf("chromium: the reward chart: %v", err)
	}
	for _, width := range []int64{1280, 390, 1280} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatalf("chromium: viewport %d: %v", width, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](chartsDrawn, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			m := get()
			t.Errorf("%d px wide: the reward chart, %v px wide, is not drawn at its width: %v", width, m.Width, err)
		}
		m := get()
		if m.Labels == 0 || m.Least < 10 {
			t.Errorf("%d px wide: the smallest of %d chart labels is %.1f px high on the screen, want at least 10", width, m.Labels, m.Least)
		}
		if m.Out > 1 {
			t.Errorf("%d px wide: chart labels (%s) stick out of their chart, by up to %.1f px", width, m.Which, m.Out)
		}
	}
}

// chartsDrawn holds once the reward chart is drawn at its width: the
// charts are drawn again 100 ms after the window changed.
const chartsDrawn = `Math.abs(document.querySelector("#curve").viewBox.baseVal.width - document.querySelector("#curve").getBoundingClientRect().width) < 4`

// chartSizes are the dashboard's chart labels as measured on the screen.
type chartSizes struct {
	Least  float64 // the smallest label's height on the screen (font size times the drawing's scale)
	Out    float64 // how far a label sticks out of its chart, at most
	Which  string  // the labels more than 1 px out: their chart and text
	Labels int
	Width  float64 // the reward chart's width
	Texts  map[string][]string
}

// measureCharts measures the labels of every chart on the page.
func measureCharts(ctx context.Context, t *testing.T) chartSizes {
	t.Helper()
	const measure = `JSON.stringify((() => {
	  let least = Infinity, out = 0, labels = 0, which = "";
	  const texts = {};
	  for (const svg of document.querySelectorAll("svg.chart")) {
	    const box = svg.getBoundingClientRect(), scale = svg.getScreenCTM().a;
	    texts[svg.id] = [];
	    for (const t of svg.querySelectorAll("text")) {
	      labels++;
	      texts[svg.id].push(t.textContent);
	      least = Math.min(least, parseFloat(getComputedStyle(t).fontSize) * scale);
	      const r = t.getBoundingClientRect();
	      out = Math.max(out, box.left - r.left, r.right - box.right);
	      if (Math.max(box.left - r.left, r.right - box.right) > 1) which += (which ? ", " : "") + svg.id + " " + JSON.stringify(t.textContent);
	    }
	  }
	  return {least, out, which, labels, texts, width: document.querySelector("#curve").getBoundingClientRect().width};
	})())`
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](measure))
	if err != nil {
		t.Fatalf("chromium: measure: %v", err)
	}
	var m chartSizes
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDashboardChartLabelsFit: the margins beside a chart's plot were
// fixed (48 px left, 44 right with a right axis, 12 without), so a long
// label ran past the chart's edge: the trainer chart's grad norm of
// 7.5e-10 on the right, a loss of 12345 on the left, step 1000 under the
// reward chart's right end. The margins fit the labels, at desktop and
// phone widths.
func TestDashboardChartLabelsFit(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll("#curve circle.pt.val").length === 3`)); err != nil {
		t.Fatalf("chromium: the reward chart: %v", err)
	}
	// The run's steps get trainer metrics, and the run 1000 steps: the
	// page draws its run again at each width from state.run.
	const long = `(() => {
	  const r = state.run;
	  r.config.run.steps = 1000;
	  r.steps.forEach((s, i) => { s.job = { ...(s.job || {}), metrics: { loss: 12345.67 - i, kl: 0.01, grad_norm: 7.5e-10 * (i + 1) / r.steps.length } }; });
	  render(r);
	  return true;
	})()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](long)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
			t.Fatalf("chromium: viewport %d: %v", width, err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](chartsDrawn, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
			t.Fatalf("%d px wide: the charts are not drawn at their width: %v", width, err)
		}
		m := measureCharts(ctx, t)
		// The trainer chart's left axis reads from 5% below to 5% above 0
		// to 12345.67: its top label is 12962.95.
		for _, want := range [][2]string{{"trainer", "7.5e-10"}, {"trainer", "12962.95"}, {"curve", "1000"}, {"deadlock", "1000"}} {
			if !slices.Contains(m.Texts[want[0]], want[1]) {
				t.Errorf("%d px wide: the %s chart's labels %q, want %q among them", width, want[0], m.Texts[want[0]], want[1])
			}
		}
		if m.Out > 1 {
			t.Errorf("%d px wide: chart labels (%s) stick out of their chart, by up to %.1f px", width, m.Which, m.Out)
		}
	}
}
