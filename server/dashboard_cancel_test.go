package server_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardCancelErrorStays clicks Cancel on a live run's page without
// the daemon's token. The refusal was written where the run's own error
// goes, and the next of the run's events redrew that line from the store:
// the message was gone within a fraction of a second, and the click
// seemed to do nothing. It must stay until the next click.
func TestDashboardCancelErrorStays(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{Token: "s3cret"})
	if code, body := do(t, "POST", s.URL()+"/api/v1/runs", "s3cret", smallRun("live", 400)); code != http.StatusCreated {
		t.Fatalf("launch: %d %s", code, body)
	}
	defer do(t, "POST", s.URL()+"/api/v1/runs/live/cancel", "s3cret", "")
	ctx := openDashboard(t, s.URL()+"/?run=live", 1280, 900)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#cancel`))); err != nil {
		t.Fatalf("chromium: click Cancel: %v", err)
	}
	const shown = `[...document.querySelectorAll('#detail .error')].some((p) => p.textContent.includes('token'))`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](shown)); err != nil {
		t.Fatalf("chromium: no error naming the token after Cancel: %v", err)
	}
	// The run goes on, and its events redraw the page meanwhile.
	if err := chromedp.Do(ctx, chromedp.Sleep(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	still, err := chromedp.Run(ctx, chromedp.Evaluate[bool](shown+` && document.querySelector('#run-state').textContent === 'running'`))
	if err != nil {
		t.Fatal(err)
	}
	if !still {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#run-state').textContent + ": " + [...document.querySelectorAll('#detail .error')].map((p) => p.textContent).join(" | ")`))
		t.Fatalf("two seconds after the refused Cancel, the page no longer says why (or the run stopped): %q", page)
	}
}
