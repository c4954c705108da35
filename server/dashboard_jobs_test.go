package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
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
	// 2.5 s between submission and end; no loss reported yet for step 2,
	// and no diagnostics by either job's trainer.
	if want := "1 trained.1/step-0001 succeeded done 0.2500 - - - - 2.50 | 2 trained.1/step-0002 running 40% - - - - - -"; got != want {
		t.Errorf("trainer jobs:\n%q\nwant\n%q", got, want)
	}
}

// TestDashboardTrainerDiagnostics: a stored job's diagnostics fill the
// trainer jobs table's columns and the diagnostics chart; a gap above
// orchestrator.LogprobGapWarning is marked as a warning, one below is
// not, nor one of a job whose rollouts an older policy sampled; a
// job_state event's metrics update its row.
func TestDashboardTrainerDiagnostics(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = "diag", 4
	if err := e.store.CreateRun(ctx, checkpoint.Run{Name: "diag", Config: cfg.JSON(), Steps: 4, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	submitted := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	lag := 1
	job := func(step int, gap float64) *checkpoint.Job {
		return &checkpoint.Job{ID: fmt.Sprintf("diag.1/step-%04d", step), State: "succeeded", Submitted: submitted, Finished: submitted.Add(time.Second),
			Metrics: map[string]float64{"loss": 0.25, "kl": 0, "grad_norm": 1, "clip_fraction": 0.125,
				"optimizer_step": float64(4 * step), "sampler_logprob_gap": gap, "entropy": 1.5, "update_norm": 0.0625}}
	}
	for _, s := range []checkpoint.Step{{Step: 0, N: 5}, {Step: 1, N: 5, Train: &checkpoint.TrainStats{}, Job: job(1, 0.5)},
		{Step: 2, N: 5, Train: &checkpoint.TrainStats{}, Job: job(2, 0.01)},
		{Step: 3, N: 5, Train: &checkpoint.TrainStats{OffPolicyLag: &lag}, Job: job(3, 0.5)}} {
		if err := e.store.CommitStep(ctx, "diag", s, &checkpoint.Evaluation{Step: s.Step, Episodes: 4, RewardMean: 0.5}); err != nil {
			t.Fatal(err)
		}
	}
	s := e.MustStart(t, server.Options{})
	page := openDashboard(t, s.URL()+"/?run=diag", 1280, 900)
	if _, err := chromedp.Run(page, chromedp.Poll[bool](`document.querySelectorAll("#jobs tbody tr").length === 3`)); err != nil {
		t.Fatalf("chromium: the stored jobs' rows: %v", err)
	}
	if got, want := jobRows(t, page), "1 diag.1/step-0001 succeeded done 0.2500 4 0.5000 1.500 0.0625 1.00 | 2 diag.1/step-0002 succeeded done 0.2500 8 0.0100 1.500 0.0625 1.00 | 3 diag.1/step-0003 succeeded done 0.2500 12 0.5000 1.500 0.0625 1.00"; got != want {
		t.Errorf("trainer jobs:\n%q\nwant\n%q", got, want)
	}
	warned, err := chromedp.Run(page, chromedp.Evaluate[string](`[...document.querySelectorAll("#jobs td.warn")].map((td) => td.closest("tr").dataset.job + " " + td.textContent).join(", ")`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "diag.1/step-0001 0.5000"; warned != want {
		t.Errorf("cells marked as a warning: %q, want %q", warned, want)
	}
	for sel, want := range map[string]int{`#diagnostics circle.pt.gap`: 3, `#diagnostics circle.pt.clip`: 3, `#diagnostics circle.pt.entropy`: 3} {
		n, err := chromedp.Run(page, chromedp.Evaluate[int](`document.querySelectorAll("`+sel+`").length`))
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d, want %d", sel, n, want)
		}
	}
	values, err := chromedp.Run(page, chromedp.Evaluate[string](`[...document.querySelectorAll("#diagnostics circle.pt.gap")].map((c) => c.dataset.step + ":" + c.dataset.value).join(" ")`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "1:0.5 2:0.01 3:0.5"; values != want {
		t.Errorf("gap points %q, want %q", values, want)
	}

	// A live job's metrics, from its job_state event.
	got, err := chromedp.Run(page, chromedp.Evaluate[string](`(() => {
	  onEvent({type: "job_state", run: "diag", step: 4, time: new Date().toISOString(), data: {id: "diag.1/step-0004", state: "succeeded", progress: 1,
	    metrics: {loss: 0.5, kl: 0, grad_norm: 1, clip_fraction: 0, optimizer_step: 16, sampler_logprob_gap: 0.25, entropy: 2, update_norm: 0.125}}});
	  return [...document.querySelector('#jobs tr[data-job="diag.1/step-0004"]').children].map((td) => td.textContent + (td.className ? "!" : "")).join(" ");
	})()`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if want := "4 diag.1/step-0004 succeeded 100% 0.5000 16 0.2500! 2.000 0.1250 -"; got != want {
		t.Errorf("live job row %q, want %q", got, want)
	}
}

// TestDashboardGapThreshold: the dashboard marks the gap above the
// threshold grpo warns at.
func TestDashboardGapThreshold(t *testing.T) {
	js, err := os.ReadFile(filepath.Join("static", "app.js"))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("const GAP_WARNING = %v;", orchestrator.LogprobGapWarning); !strings.Contains(string(js), want) {
		t.Fatalf("static/app.js lacks %q: the dashboard's gap threshold is not orchestrator.LogprobGapWarning", want)
	}
}
