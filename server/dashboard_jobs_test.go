package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardStoredJobProgress: the trainer jobs table showed 100% for
// every job read from the store, a figure the store does not keep (the
// job is a committed step's: finished); it says "done". A live job's
// progress is the job_state event's.
func TestDashboardStoredJobProgress(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = "trained", 2
	if err := e.store.CreateRun(ctx, checkpoint.Run{Name: "trained", Config: cfg.JSON(), Steps: 2, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	submitted := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	for _, s := range []checkpoint.Step{{Step: 0, N: 5}, {Step: 1, N: 5, Train: &checkpoint.TrainStats{},
		Job: &checkpoint.Job{ID: "trained.1/step-0001", State: "succeeded", Metrics: map[string]float64{"loss": 0.25},
			Submitted: submitted, Finished: submitted.Add(2500 * time.Millisecond)}}} {
		if err := e.store.CommitStep(ctx, "trained", s, &checkpoint.Evaluation{Step: s.Step, Episodes: 4, RewardMean: 0.5}); err != nil {
			t.Fatal(err)
		}
	}
	s := e.MustStart(t, server.Options{})
	page := openDashboard(t, s.URL()+"/?run=trained", 1280, 900)
	const rows = `[...document.querySelectorAll("#jobs tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent).join(" ")).join(" | ")`
	if _, err := chromedp.Run(page, chromedp.Poll[bool](`document.querySelectorAll("#jobs tbody tr").length === 1`)); err != nil {
		t.Fatalf("chromium: the stored job's row: %v", err)
	}
	got, err := chromedp.Run(page, chromedp.Evaluate[string](`(() => {
	  onEvent({type: "job_state", run: "trained", step: 2, time: new Date().toISOString(), data: {id: "trained.1/step-0002", state: "running", progress: 0.4}});
	  return `+rows+`;
	})()`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	// 2.5 s between submission and end; no loss reported yet for step 2.
	if want := "1 trained.1/step-0001 succeeded done 0.2500 2.50 | 2 trained.1/step-0002 running 40% - -"; got != want {
		t.Errorf("trainer jobs:\n%q\nwant\n%q", got, want)
	}
}
