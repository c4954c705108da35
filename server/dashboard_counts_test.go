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

// TestDashboardCountsOfOne: the page said "1 replays", "1 stored
// episodes", "1 meals", "1 rounds", "over 1 episodes" and "1 of 1
// training episodes"; a count of one names one thing.
func TestDashboardCountsOfOne(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = "one", 1
	if err := e.store.CreateRun(ctx, checkpoint.Run{Name: "one", Config: cfg.JSON(), Steps: 1, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	moves := make([]checkpoint.ReplayMove, 5)
	for i := range moves {
		moves[i] = checkpoint.ReplayMove{Action: "think", OK: true, Forks: []int{}, Output: "think()"}
	}
	replay := checkpoint.EpisodeReplay{ID: "v0-e0", N: 5, Seed: 7, Reward: 0.5, Meals: 1, Rounds: []checkpoint.ReplayRound{{Round: 1, Moves: moves}}}
	if err := e.store.CommitStep(ctx, "one", checkpoint.Step{Step: 0, N: 5},
		&checkpoint.Evaluation{Step: 0, Episodes: 1, RewardMean: 0.5, Transcripts: []checkpoint.EpisodeReplay{replay}}); err != nil {
		t.Fatal(err)
	}
	s := e.MustStart(t, server.Options{})
	page := openDashboard(t, s.URL()+"/?run=one", 1280, 900)
	if err := chromedp.Do(page, chromedp.WaitVisible(chromedp.CSS(`#steps button.tx-open[data-step="0"]`))); err != nil {
		t.Fatalf("chromium: step 0's replays button: %v", err)
	}
	if got, err := chromedp.Run(page, chromedp.Evaluate[string](`document.querySelector('#steps button.tx-open[data-step="0"]').textContent`)); err != nil || got != "1 replay" {
		t.Errorf("replays button %q (%v), want \"1 replay\"", got, err)
	}
	if _, err := chromedp.Run(page, chromedp.Evaluate[bool](`document.querySelector('#steps button.tx-open[data-step="0"]').click(), true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(page, chromedp.WaitVisible(chromedp.CSS(`#tx-list li[data-episode="v0-e0"]`))); err != nil {
		t.Fatalf("chromium: episode list: %v", err)
	}
	got, err := chromedp.Run(page, chromedp.Evaluate[string](`document.querySelector("#tx-none").textContent + " | " + document.querySelector("#tx-list li").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "step 0: 1 stored episode | v0-e0 n=5 table 7, reward 0.500, 1 meal, 1 round"; got != want {
		t.Errorf("episode list %q, want %q", got, want)
	}
	// The progress line: a step of one training episode, then one of one
	// validation episode, validated.
	got, err = chromedp.Run(page, chromedp.Evaluate[string](`(() => {
	  const ev = (type, step, data) => onEvent({type, run: "one", step, time: new Date().toISOString(), data});
	  const out = [];
	  ev("step_started", 1, {n: 5, episodes: 1, validation: 0});
	  ev("episode_finished", 1, {split: "train", id: "s1-e0", n: 5, reward: 0.1});
	  out.push(document.querySelector("#progress").textContent);
	  ev("step_started", 2, {n: 5, episodes: 0, validation: 1});
	  out.push(document.querySelector("#progress").textContent);
	  ev("validation_done", 2, {episodes: 1, reward_mean: 0.25, reward_ci95: [0.25, 0.25]});
	  out.push(document.querySelector("#progress").textContent);
	  return out.join(" | ");
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"step 1: 1 of 1 training episode |",
		"step 1: 1 of 1 training episode · step 2: 0 of 1 validation episode |",
		"step 2 validation reward 0.250 [0.250, 0.250] over 1 episode",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("progress %q: want %q", got, want)
		}
	}
}
