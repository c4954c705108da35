package orchestrator

import (
	"fmt"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
)

// BenchmarkSelectBest is the selection a commit runs, on the curve the run
// keeps in memory, at 100 and at 10,000 steps (validation every 2 steps,
// ema 0.5): go test -run '^$' -bench SelectBest ./orchestrator
func BenchmarkSelectBest(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("steps=%d", n), func(b *testing.B) {
			r := &run{}
			r.cfg.Validation.Selection = checkpoint.PolicyBestValidation
			r.cfg.Validation.Metric = checkpoint.MetricRewardMean
			r.cfg.Validation.EMA = 0.5
			for s := 0; s <= n; s++ {
				r.steps = append(r.steps, checkpoint.Step{Step: s, N: 5, Adapter: &checkpoint.Adapter{Name: fmt.Sprint("a", s)}})
				if s%2 == 0 {
					r.evals = append(r.evals, checkpoint.Evaluation{Step: s, RewardMean: float64(s%7) / 7})
				}
			}
			for b.Loop() {
				sel, err := r.selectBest()
				if err != nil || sel.LastStep != n {
					b.Fatalf("selection %+v, %v", sel, err)
				}
			}
		})
	}
}
