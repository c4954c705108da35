package server_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardResume: a failed run's page offers Resume and the retry of
// its trainer job; without the daemon's token the refusal stays on the
// page; with it, Resume with the retry checked plays the run again and it
// succeeds. A run that succeeded offers neither.
func TestDashboardResume(t *testing.T) {
	b := refBackend(t)
	ref := httptest.NewServer((&failFirstJob{}).handler(b.Handler()))
	defer ref.Close()
	e := newEnv(t)
	s := e.MustStart(t, server.Options{Token: "s3cret"})
	base := s.URL()
	if code, body := do(t, "POST", base+"/api/v1/runs", "s3cret", `run: {name: rj, steps: 2}
inference: {endpoints: [{url: `+ref.URL+`/v1}], model: refmodel}
trainer: {kind: jobs, url: `+ref.URL+`, base_model: refmodel}
validation: {episodes: 2}
`); code != http.StatusCreated {
		t.Fatalf("launch: %d %s", code, body)
	}
	if r := waitRun(t, base, "rj", "the failed job to end the run", finished); r.State != checkpoint.StateFailed {
		t.Fatalf("run ended %s (%q), want failed", r.State, r.Error)
	}

	ctx := openDashboard(t, base+"/?run=rj", 1280, 900)
	const offered = `!document.querySelector('#resume').hidden && !document.querySelector('#retry-job-label').hidden && document.querySelector('#cancel').hidden`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](offered)); err != nil {
		t.Fatalf("chromium: a failed run's page offers no Resume and retry: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#resume`))); err != nil {
		t.Fatalf("chromium: click Resume: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('#cancel-error').textContent.startsWith('resume: ') && document.querySelector('#cancel-error').textContent.includes('token')`)); err != nil {
		t.Fatalf("chromium: no refusal naming the token after Resume without it: %v", err)
	}

	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#token`), "s3cret"),
		chromedp.Click(chromedp.CSS(`#retry-job`)),
		chromedp.Click(chromedp.CSS(`#resume`)),
	); err != nil {
		t.Fatalf("chromium: resume with the token and the retry: %v", err)
	}
	// The run is still recorded failed until the click's request lands.
	r := waitRun(t, base, "rj", "the resumed run to succeed", func(r runJSON) bool { return finished(r) && r.State != checkpoint.StateFailed })
	if r.State != checkpoint.StateSucceeded || len(r.Steps) != 3 {
		t.Fatalf("after Resume with the retry: state %s (%q), %d steps; want succeeded with 3", r.State, r.Error, len(r.Steps))
	}
	const gone = `document.querySelector('#run-state').textContent === 'succeeded' && document.querySelector('#resume').hidden && document.querySelector('#retry-job-label').hidden && document.querySelector('#cancel-error').textContent === ''`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](gone)); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#run-state').textContent + " resume hidden " + document.querySelector('#resume').hidden + " | " + document.querySelector('#cancel-error').textContent`))
		t.Fatalf("chromium: a succeeded run's page still offers Resume or an error: %v (%s)", err, page)
	}
}
