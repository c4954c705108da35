package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
)

// storeRow commits a run of Curve steps (each with its train statistics
// and a validation) to a fresh store, selecting the best step after each
// commit as the orchestrator does (checkpoint.Select on the curve it keeps
// in memory), then reads the whole curve back: what selecting on commit
// cost when it re-read the run.
func storeRow(ctx context.Context, o Options) ([]Result, error) {
	dir, err := os.MkdirTemp("", "grpo-bench-store-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	st := checkpoint.New(filepath.Join(dir, "bench.db"), checkpoint.Options{})
	const name = "bench"
	if err := st.CreateRun(ctx, checkpoint.Run{Name: name, Config: []byte(`{}`), State: checkpoint.StateRunning,
		Steps: o.Curve, Policy: "best-validation", Metric: "reward_mean"}); err != nil {
		return nil, err
	}
	rewards := make([]float64, 24)
	records := make([]checkpoint.EpisodeRecord, 24) // as a run's validation keeps them
	for i := range records {
		records[i] = checkpoint.EpisodeRecord{N: 5, Seed: int64(i), Reward: 0.5, Meals: 3}
	}
	var (
		first, last       time.Duration     // commits
		selFirst, selLast time.Duration     // selections after them
		mSteps            []checkpoint.Step // the curve the orchestrator keeps
		mEvals            []checkpoint.Evaluation
		sel               checkpoint.Selection
	)
	tail := min(100, o.Curve)
	t0 := time.Now()
	for s := 0; s <= o.Curve; s++ {
		step := checkpoint.Step{Step: s, N: 5, Committed: time.Now(), Seconds: map[string]float64{"rollout": 1, "train": 2}}
		if s > 0 {
			step.Train = &checkpoint.TrainStats{Episodes: 6, RewardMean: 0.5, Groups: []checkpoint.GroupStats{
				{ID: "g0", Seed: 1, N: 5, Rewards: []float64{0.1, 0.2, 0.3}}, {ID: "g1", Seed: 2, N: 5, Rewards: []float64{0.4, 0.5, 0.6}}}}
			step.Job = &checkpoint.Job{ID: fmt.Sprintf("%s/step-%04d", name, s), State: "succeeded", Metrics: map[string]float64{"loss": 0.1}}
			step.Adapter = &checkpoint.Adapter{Name: fmt.Sprintf("%s-step-%04d", name, s), Path: "/adapters/x"}
		}
		ev := &checkpoint.Evaluation{Step: s, Episodes: 24, RewardMean: 0.5, Rewards: rewards, PerN: []checkpoint.EvalN{{N: 5, Episodes: 24}}, Records: records}
		c0 := time.Now()
		if err := st.CommitStep(ctx, name, step, ev); err != nil {
			return nil, err
		}
		d := time.Since(c0)
		c0 = time.Now()
		mSteps, mEvals = append(mSteps, step.Head()), append(mEvals, ev.Head())
		if sel, err = checkpoint.Select(checkpoint.PolicyBestValidation, checkpoint.MetricRewardMean, 0.5, mSteps, mEvals); err != nil {
			return nil, fmt.Errorf("select at step %d: %w", s, err)
		}
		ds := time.Since(c0)
		if s < tail {
			first, selFirst = first+d, selFirst+ds
		}
		if s > o.Curve-tail {
			last, selLast = last+d, selLast+ds
		}
	}
	total := time.Since(t0)
	if sel.LastStep != o.Curve {
		return nil, fmt.Errorf("selection's last step %d, want %d", sel.LastStep, o.Curve)
	}
	r0 := time.Now()
	_, steps, evals, err := st.Snapshot(ctx, name)
	read := time.Since(r0)
	if err != nil {
		return nil, err
	}
	if len(steps) != o.Curve+1 || len(evals) != o.Curve+1 {
		return nil, fmt.Errorf("read back %d steps and %d evaluations, want %d", len(steps), len(evals), o.Curve+1)
	}
	r0 = time.Now()
	if _, steps, evals, err = st.Curve(ctx, name); err != nil {
		return nil, err
	}
	curve := time.Since(r0)
	if len(steps) != o.Curve+1 || len(evals) != o.Curve+1 {
		return nil, fmt.Errorf("read back %d steps and %d evaluations for the curve, want %d", len(steps), len(evals), o.Curve+1)
	}
	c := fmt.Sprintf("%d steps", o.Curve)
	ms := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) / 1e3 }
	us := func(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) / 1e3 }
	return []Result{
		{"store", c, "commit a step and select the best (mean)", ms(total, o.Curve+1), "ms"},
		{"store", c, fmt.Sprintf("commit, first %d", tail), ms(first, tail), "ms"},
		{"store", c, fmt.Sprintf("commit, last %d", tail), ms(last, tail), "ms"},
		{"store", c, fmt.Sprintf("select in memory after a commit, first %d", tail), us(selFirst, tail), "us"},
		{"store", c, fmt.Sprintf("select in memory after a commit, last %d", tail), us(selLast, tail), "us"},
		{"store", c, "read the whole run (Snapshot)", ms(read, 1), "ms"},
		{"store", c, "read the curve (Curve: no validation records)", ms(curve, 1), "ms"},
	}, nil
}
