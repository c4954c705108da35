package evaluate_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

func set(ns ...int) evaluate.Set {
	return evaluate.Set{
		Model: "scripted", Env: rollout.DefaultEnvConfig(), Reward: rollout.DefaultRewardConfig(),
		Sampling: rollout.Sampling{Temperature: 1, MaxTokens: 16},
		N:        ns, Episodes: 3, What: "validation",
		Seeds: func(n, e int) (int64, int64) { return 100 + int64(e), rollout.RequestSeed(100, n, e) },
		ID:    func(n, e int) string { return fmt.Sprintf("n%d-e%d", n, e) },
	}
}

func TestSpecs(t *testing.T) {
	specs := set(5, 7).Specs()
	if got, want := len(specs), 6; got != want {
		t.Fatalf("len(Specs())=%d, want %d", got, want)
	}
	last := specs[5]
	if last.ID != "n7-e2" || last.Env.N != 7 || last.Env.Seed != 102 || last.SampleSeed != rollout.RequestSeed(100, 7, 2) || last.Model != "scripted" {
		t.Fatalf("Specs()[5]=%+v", last)
	}
}

// TestRun plays DESIGN §3's worked example, whose reward at n=5 is 1.3275.
func TestRun(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	client := inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{RequestTimeout: 10 * time.Second})
	var seen atomic.Int64
	res, err := evaluate.Run(context.Background(), evaluate.Options{
		Client: client, Concurrency: 4, OnEpisode: func(rollout.Episode) { seen.Add(1) },
	}, set(5, 5))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seen.Load(), int64(6); got != want {
		t.Fatalf("OnEpisode called %d times, want %d", got, want)
	}
	if got, want := res.Stats.Reward.Mean, 1.3275; math.Abs(got-want) > 1e-9 {
		t.Fatalf("reward mean=%v, want %v", got, want)
	}
	ev := res.Evaluation(3)
	if ev.Step != 3 || ev.Episodes != 6 || len(ev.PerN) != 2 || ev.PerN[1].Episodes != 3 || len(ev.Rewards) != 6 {
		t.Fatalf("Evaluation(3)=%+v", ev)
	}
	// Every episode is recorded, with §3's worked-example terms: meals
	// (3,0,3,0,0), r_nd 1, r_thru 1, r_fair 0.375, r_idle 0.6.
	if len(ev.Records) != 6 {
		t.Fatalf("Evaluation(3) has %d records, want 6", len(ev.Records))
	}
	for i, r := range ev.Records {
		want := checkpoint.EpisodeRecord{N: 5, Seed: 100 + int64(i%3), Reward: r.Reward,
			Terms: checkpoint.RewardTerms{NoDeadlock: 1, Throughput: 1, Unfairness: 0.375, Idle: 0.6},
			Meals: 6, Calls: 25}
		if math.Abs(r.Terms.Unfairness-0.375) < 1e-12 {
			r.Terms.Unfairness = 0.375 // 2.16/5.76 in floating point
		}
		if math.Abs(r.Reward-1.3275) > 1e-9 || r != want {
			t.Fatalf("Records[%d]=%+v, want %+v with reward 1.3275", i, r, want)
		}
	}
}

func TestRun_AllFailed(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	srv.Fail = func(int64) int { return http.StatusBadRequest }
	client := inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{RequestTimeout: 10 * time.Second, Retry: &httpx.Policy{}})
	_, err := evaluate.Run(context.Background(), evaluate.Options{Client: client, Concurrency: 4}, set(5))
	if !errors.Is(err, evaluate.ErrAllFailed) {
		t.Fatalf("Run()=%v, want ErrAllFailed", err)
	}
	var af *evaluate.AllFailedError
	if !errors.As(err, &af) || af.First == "" {
		t.Fatalf("Run()=%#v, want an *AllFailedError with the first error", err)
	}
	if got, want := err.Error()[:len("every validation episode failed")], "every validation episode failed"; got != want {
		t.Fatalf("Run()=%q, want prefix %q", err, want)
	}
}

// TestEvaluationPerN: each table size's figures, its reward standard
// deviation and invalid rate included, are those of its own episodes,
// errored ones left out.
func TestEvaluationPerN(t *testing.T) {
	ep := func(reward float64, invalid, calls int) rollout.Episode {
		return rollout.Episode{Reward: reward, Metrics: rollout.Metrics{Invalid: invalid, LLMCalls: calls}}
	}
	eps := []rollout.Episode{
		ep(0.25, 1, 4), ep(0.75, 0, 4), // n=5
		ep(1, 3, 6), {Errored: true, Metrics: rollout.Metrics{Invalid: 9, LLMCalls: 9}}, // n=10
	}
	r := evaluate.Result{Episodes: eps, Stats: grpo.SummarizeEpisodes(eps), PerN: []evaluate.PerN{
		{N: 5, Stats: grpo.SummarizeEpisodes(eps[:2])}, {N: 10, Stats: grpo.SummarizeEpisodes(eps[2:])},
	}}
	ev := r.Evaluation(7)
	if len(ev.PerN) != 2 {
		t.Fatalf("PerN=%+v, want 2 sizes", ev.PerN)
	}
	// n=5: rewards 0.25 and 0.75, sample std sqrt(2*0.25^2/1) = 0.35355...;
	// 1 invalid output in 8 calls. n=10: one episode (std 0), 3 in 6.
	for i, want := range []struct {
		n, episodes  int
		std, invalid float64
	}{{5, 2, 0.3535533905932738, 0.125}, {10, 1, 0, 0.5}} {
		got := ev.PerN[i]
		if got.N != want.n || got.Episodes != want.episodes || got.RewardStd == nil ||
			math.Abs(*got.RewardStd-want.std) > 1e-12 || got.InvalidRate != want.invalid {
			t.Errorf("PerN[%d]=%+v (std %v), want n %d, %d episodes, std %v, invalid rate %v",
				i, got, got.RewardStd, want.n, want.episodes, want.std, want.invalid)
		}
	}
}
