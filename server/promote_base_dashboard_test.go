package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardPromoteBaseStep: a run whose selected step is step 0 (the
// base model validated best) has no adapter to promote. The page enabled
// Promote for it (the run names an endpoint), and the click only earned
// the daemon's 409; the button must be disabled and say why.
func TestDashboardPromoteBaseStep(t *testing.T) {
	e := newEnv(t)
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = "base", 1
	cfg.Inference.Endpoints = []config.Endpoint{{URL: "http://127.0.0.1:1/v1"}}
	ctx := context.Background()
	if err := e.store.CreateRun(ctx, checkpoint.Run{Name: "base", Config: cfg.JSON(), Steps: 1, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	for step, r := range []float64{0.6, 0.2} {
		s := checkpoint.Step{Step: step, N: 5}
		if step > 0 {
			s.Adapter = &checkpoint.Adapter{Name: "base-step-0001", Path: t.TempDir()}
		}
		if err := e.store.CommitStep(ctx, "base", s, &checkpoint.Evaluation{Step: step, Episodes: 4, RewardMean: r}); err != nil {
			t.Fatal(err)
		}
	}
	s := e.MustStart(t, server.Options{})
	tctx := openDashboard(t, s.URL()+"/?run=base", 1280, 900)
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector('#run-name').textContent === 'base'`)); err != nil {
		t.Fatalf("chromium: run base's page: %v", err)
	}
	on, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`!document.querySelector('#promote').disabled`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('#promote').title`))
	if err != nil {
		t.Fatal(err)
	}
	if on || !strings.Contains(title, "base model") {
		t.Fatalf("run whose best step is 0: Promote enabled %v, title %q; want disabled, saying the step is the base model", on, title)
	}
}
