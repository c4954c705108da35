package server_test

import (
	"encoding/json"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardNarrowLayout shows a run's page on a phone-sized viewport
// (390 px): the runs column kept its 22em beside the run, which got what
// was left (about 60 px: charts a thumbnail wide) while the steps table
// pushed the page to three times the screen's width. The columns must
// stack, the charts take the width, and only the wide tables scroll, in
// their own box.
func TestDashboardNarrowLayout(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatalf("chromium: phone viewport: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
	  inner: window.innerWidth,
	  page: document.documentElement.scrollWidth,
	  curve: document.querySelector("#curve").getBoundingClientRect().width,
	})`))
	if err != nil {
		t.Fatalf("chromium: measure: %v", err)
	}
	var m struct{ Inner, Page, Curve float64 }
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	if m.Inner != 390 {
		t.Fatalf("viewport %v px wide, want 390", m.Inner)
	}
	if m.Page > m.Inner {
		t.Errorf("the page is %v px wide on a %v px screen: it scrolls sideways", m.Page, m.Inner)
	}
	if m.Curve < 0.8*m.Inner {
		t.Errorf("the reward chart is %v px wide on a %v px screen", m.Curve, m.Inner)
	}
}
