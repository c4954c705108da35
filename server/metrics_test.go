package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/rollout"

	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsFromEvents feeds events, decoded from their JSON form, to the
// metrics and reads the series back.
func TestMetricsFromEvents(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	for _, in := range []string{
		`{"type":"run_started","run":"r","step":3,"data":{"steps":4,"from":3}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"train","deadlocked":true,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":5,"reward":0.25,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":5,"reward":0.75,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":10,"reward":1,"seconds":0.5}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"running"}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"succeeded"}}`,
		`{"type":"adapter_loaded","run":"r","step":3,"data":{"name":"r/step-0003","path":"/x"}}`,
		`{"type":"validation_done","run":"r","step":3,"data":{"reward_mean":0.5,"reward_std":0.25,"deadlock_rate":0.25,"meals_mean":3,"invalid_rate":0.125,
		  "per_n":[{"n":5,"episodes":2,"reward_mean":0.5,"deadlock_rate":0.5,"meals_mean":2,"invalid_rate":0.25,"reward_std":0.375},{"n":10,"episodes":1,"reward_mean":1,"deadlock_rate":0,"meals_mean":5,"invalid_rate":0,"reward_std":0}]}}`,
		`{"type":"best_changed","run":"r","step":3,"data":{"step":2,"value":0.75}}`,
		`{"type":"step_committed","run":"r","step":3,"data":{"step":3,"n":5,"train":{"reward_mean":0.125,"reward_std":0.5,"zero_variance_groups":1,"deadlock_rate":0.5,"meals_mean":1.5,"invalid_rate":0.25},
		  "job":{"submitted":"2026-01-02T15:04:05Z","finished":"2026-01-02T15:04:07Z","metrics":{"loss":0.75,"kl":0.0625,"grad_norm":1.5}}}}`,
	} {
		var e orchestrator.Event
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("decode %s: %v", in, err)
		}
		m.event(e)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"grpo_step", value(t, m.step.WithLabelValues("r")), 3},
		{"grpo_episodes_total train", value(t, m.episodes.WithLabelValues("r", "train")), 1},
		{"grpo_deadlocks_total train", value(t, m.deadlocks.WithLabelValues("r", "train")), 1},
		{"grpo_deadlocks_total validation", value(t, m.deadlocks.WithLabelValues("r", "validation")), 0},
		{"grpo_trainer_jobs_total succeeded", value(t, m.jobs.WithLabelValues("r", "succeeded")), 1},
		{"grpo_trainer_jobs_total running", value(t, m.jobs.WithLabelValues("r", "running")), 0},
		{"grpo_adapter_loads_total", value(t, m.adapterLoads.WithLabelValues("r")), 1},
		{"grpo_reward_mean validation all", value(t, m.rewardMean.WithLabelValues("r", "validation", "all")), 0.5},
		{"grpo_reward_std validation all", value(t, m.rewardStd.WithLabelValues("r", "validation", "all")), 0.25},
		{"grpo_reward_mean validation n=5", value(t, m.rewardMean.WithLabelValues("r", "validation", "5")), 0.5},
		{"grpo_reward_mean validation n=10", value(t, m.rewardMean.WithLabelValues("r", "validation", "10")), 1},
		{"grpo_reward_std validation n=5", value(t, m.rewardStd.WithLabelValues("r", "validation", "5")), 0.375},
		{"grpo_reward_std validation n=10", value(t, m.rewardStd.WithLabelValues("r", "validation", "10")), 0},
		{"grpo_invalid_rate validation n=5", value(t, m.invalidRate.WithLabelValues("r", "validation", "5")), 0.25},
		{"grpo_deadlock_rate validation all", value(t, m.deadlockRate.WithLabelValues("r", "validation", "all")), 0.25},
		{"grpo_deadlock_rate validation n=5", value(t, m.deadlockRate.WithLabelValues("r", "validation", "5")), 0.5},
		{"grpo_meals_mean validation n=10", value(t, m.mealsMean.WithLabelValues("r", "validation", "10")), 5},
		{"grpo_invalid_rate validation all", value(t, m.invalidRate.WithLabelValues("r", "validation", "all")), 0.125},
		{"grpo_reward_mean train all", value(t, m.rewardMean.WithLabelValues("r", "train", "all")), 0.125},
		{"grpo_reward_mean train n=5", value(t, m.rewardMean.WithLabelValues("r", "train", "5")), 0.125},
		{"grpo_reward_std train n=5", value(t, m.rewardStd.WithLabelValues("r", "train", "5")), 0.5},
		{"grpo_deadlock_rate train all", value(t, m.deadlockRate.WithLabelValues("r", "train", "all")), 0.5},
		{"grpo_meals_mean train all", value(t, m.mealsMean.WithLabelValues("r", "train", "all")), 1.5},
		{"grpo_invalid_rate train n=5", value(t, m.invalidRate.WithLabelValues("r", "train", "5")), 0.25},
		{"grpo_trainer_loss", value(t, m.trainerLoss.WithLabelValues("r")), 0.75},
		{"grpo_trainer_kl", value(t, m.trainerKL.WithLabelValues("r")), 0.0625},
		{"grpo_trainer_grad_norm", value(t, m.trainerGradNorm.WithLabelValues("r")), 1.5},
		{"grpo_best_step", value(t, m.bestStep.WithLabelValues("r")), 2},
		{"grpo_best_reward", value(t, m.bestReward.WithLabelValues("r")), 0.75},
		{"grpo_zero_variance_groups_total", value(t, m.zeroVariance.WithLabelValues("r")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s=%v, want %v", c.name, c.got, c.want)
		}
	}
	var h dto.Metric
	if err := m.jobDuration.WithLabelValues("r").(prometheus.Histogram).Write(&h); err != nil {
		t.Fatal(err)
	}
	if got, want := h.GetHistogram().GetSampleCount(), uint64(1); got != want {
		t.Errorf("grpo_trainer_job_duration_seconds count=%d, want %d", got, want)
	}
	if got, want := h.GetHistogram().GetSampleSum(), 2.0; got != want {
		t.Errorf("grpo_trainer_job_duration_seconds sum=%v, want %v", got, want)
	}
}

// blocking is a Completer that waits for its context.
type blocking struct{}

func (blocking) Complete(ctx context.Context, _ *rollout.Request) (*rollout.Completion, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("chat completion: %w", ctx.Err())
}

type failing struct{}

func (failing) Complete(context.Context, *rollout.Request) (*rollout.Completion, error) {
	return nil, errors.New("server said 500")
}

// TestCancelledCallsAreNotErrors: calls in flight when their run is
// stopped count as outcome="cancelled", real failures as "error".
func TestCancelledCallsAreNotErrors(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	c := m.completer("r", blocking{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); c.Complete(ctx, &rollout.Request{}) }()
	}
	for value(t, m.inflight.WithLabelValues("r")) != 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	m.completer("r", failing{}).Complete(context.Background(), &rollout.Request{})
	for outcome, want := range map[string]float64{"cancelled": 3, "error": 1, "ok": 0} {
		if got := value(t, m.llmRequests.WithLabelValues("r", outcome)); got != want {
			t.Errorf("grpo_llm_requests_total{outcome=%q}=%v, want %v", outcome, got, want)
		}
	}
}

// TestRestoreFromNoStore: a daemon's first start, before its store file
// exists, restores nothing and finds nothing wrong.
func TestRestoreFromNoStore(t *testing.T) {
	store := checkpoint.New(filepath.Join(t.TempDir(), "none.db"), checkpoint.Options{})
	if err := newMetrics(prometheus.NewRegistry()).restore(context.Background(), store); err != nil {
		t.Fatalf("restore from a store not created yet: %v", err)
	}
}

// TestRestoreFromStore: a new daemon's metrics show the stored runs'
// last values before any event.
func TestRestoreFromStore(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.New(filepath.Join(t.TempDir(), "s.db"), checkpoint.Options{})
	if err := store.CreateRun(ctx, checkpoint.Run{Name: "done", Steps: 2, Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for i, mean := range []float64{0.25, 0.75, 0.5} {
		st := checkpoint.Step{Step: i, N: 5}
		if i > 0 {
			st.Train = &checkpoint.TrainStats{RewardMean: float64(i) / 8, DeadlockRate: 0.5}
			st.Job = &checkpoint.Job{State: "succeeded", Metrics: map[string]float64{"loss": float64(i), "kl": 0.5, "grad_norm": 2}}
		}
		// n=10's reward std is not recorded, as in evaluations stored
		// before it was.
		std := mean / 2
		ev := &checkpoint.Evaluation{Step: i, Episodes: 2, RewardMean: mean, RewardStd: 0.125, Rewards: []float64{mean, mean},
			PerN: []checkpoint.EvalN{{N: 5, Episodes: 1, RewardMean: mean - 0.25, RewardStd: &std, InvalidRate: mean / 4},
				{N: 10, Episodes: 1, RewardMean: mean + 0.25}}}
		if err := store.CommitStep(ctx, "done", st, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetRunState(ctx, "done", checkpoint.StateSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	if err := m.restore(ctx, store); err != nil {
		t.Fatal(err)
	}
	// No n=10 validation std is made up: train and validation at n=5 and
	// "all", nothing more.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "grpo_reward_std" && len(f.GetMetric()) != 4 {
			t.Errorf("grpo_reward_std has %d series after restore, want 4 (none for n=10, whose std is not stored): %v", len(f.GetMetric()), f.GetMetric())
		}
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"grpo_step", value(t, m.step.WithLabelValues("done")), 2},
		{"grpo_best_step", value(t, m.bestStep.WithLabelValues("done")), 1},
		{"grpo_best_reward", value(t, m.bestReward.WithLabelValues("done")), 0.75},
		{"grpo_reward_mean validation all", value(t, m.rewardMean.WithLabelValues("done", "validation", "all")), 0.5},
		{"grpo_reward_std validation all", value(t, m.rewardStd.WithLabelValues("done", "validation", "all")), 0.125},
		{"grpo_reward_mean validation n=5", value(t, m.rewardMean.WithLabelValues("done", "validation", "5")), 0.25},
		{"grpo_reward_mean validation n=10", value(t, m.rewardMean.WithLabelValues("done", "validation", "10")), 0.75},
		{"grpo_reward_std validation n=5", value(t, m.rewardStd.WithLabelValues("done", "validation", "5")), 0.25},
		{"grpo_invalid_rate validation n=5", value(t, m.invalidRate.WithLabelValues("done", "validation", "5")), 0.125},
		{"grpo_reward_mean train n=5", value(t, m.rewardMean.WithLabelValues("done", "train", "5")), 0.25},
		{"grpo_deadlock_rate train all", value(t, m.deadlockRate.WithLabelValues("done", "train", "all")), 0.5},
		{"grpo_trainer_loss", value(t, m.trainerLoss.WithLabelValues("done")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s=%v, want %v", c.name, c.got, c.want)
		}
	}
}

// value reads a gauge's or a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if g := d.GetGauge(); g != nil {
		return g.GetValue()
	}
	return d.GetCounter().GetValue()
}
