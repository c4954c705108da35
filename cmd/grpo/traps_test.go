package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
)

// TestReportValColumnWhenSizesDiffer: a run that trains at n=2 and
// validates at n=5 has a VAL n=5 column, so VALIDATION is not read as
// measured at N; one that validates at the size it trains at has none.
func TestReportValColumnWhenSizesDiffer(t *testing.T) {
	table := func(trainN, valN int) string {
		ev := func(step int) checkpoint.Evaluation {
			return checkpoint.Evaluation{Step: step, Episodes: 2, RewardMean: 0.25, PerN: []checkpoint.EvalN{{N: valN, Episodes: 2, RewardMean: 0.25}}}
		}
		r := &report{
			run:   checkpoint.Run{Name: "r", State: checkpoint.StateSucceeded},
			steps: []checkpoint.Step{{Step: 0, N: trainN}, {Step: 1, N: trainN}},
			evals: map[int]checkpoint.Evaluation{0: ev(0), 1: ev(1)},
		}
		r.evalList = []checkpoint.Evaluation{ev(0), ev(1)}
		var b bytes.Buffer
		r.print(&b)
		return b.String()
	}
	if out := table(2, 5); !strings.Contains(out, "VAL n=5") {
		t.Errorf("trained at n=2, validated at n=5: no VAL n=5 column:\n%s", out)
	}
	if out := table(5, 5); strings.Contains(out, "VAL n=") {
		t.Errorf("trained and validated at n=5: a VAL column:\n%s", out)
	}
}
