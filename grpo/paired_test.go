package grpo_test

import (
	"math"
	"testing"

	"github.com/grpo-dev/grpo/grpo"
)

// sleep1 and sleep2 are R's sleep data (stats_test.go).

// TestPaired checks against R 4.x:
//
//	with(sleep, t.test(extra[group == 1], extra[group == 2], paired = TRUE))
//	t = -4.0621, df = 9, p-value = 0.002833
//	95 percent confidence interval: -2.4598858 -0.7001142
//	mean difference -1.58
func TestPaired(t *testing.T) {
	r, err := grpo.Paired(sleep2, sleep1) // sleep1 - sleep2, as R's order
	if err != nil {
		t.Fatal(err)
	}
	near(t, "t", r.T, -4.0621, 5e-5)
	near(t, "df", r.DF, 9, 0)
	near(t, "p", r.P, 0.002833, 5e-7)
	near(t, "diff", r.Diff, -1.58, 1e-12)
	near(t, "ci lo", r.CI95[0], -2.4598858, 5e-8)
	near(t, "ci hi", r.CI95[1], -0.7001142, 5e-8)
	if r.N != 10 {
		t.Errorf("N=%d, want 10", r.N)
	}
	// The bootstrap interval is near the t interval on these data and
	// excludes 0 (every difference but one is negative).
	if !(r.Boot95[0] < r.Diff && r.Diff < r.Boot95[1] && r.Boot95[1] < 0 && r.Boot95[0] > -3) {
		t.Errorf("Boot95=%v, want an interval around -1.58 below 0", r.Boot95)
	}
	again, _ := grpo.Paired(sleep2, sleep1)
	if again.Boot95 != r.Boot95 {
		t.Errorf("bootstrap not reproducible: %v then %v", r.Boot95, again.Boot95)
	}
	// Pairing matters: Welch on the same data gives p = 0.07939 (R).
	near(t, "welch p", grpo.Welch(sleep2, sleep1).P, 0.07939, 5e-6)
}

func TestPaired_Degenerate(t *testing.T) {
	if _, err := grpo.Paired([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("Paired of 2 against 1 values: no error")
	}
	r, _ := grpo.Paired([]float64{1}, []float64{3})
	if r.P != 1 || r.T != 0 || r.DF != 0 || r.Diff != 2 || r.CI95 != [2]float64{2, 2} {
		t.Errorf("one pair: %+v", r)
	}
	r, _ = grpo.Paired([]float64{1, 2, 3}, []float64{2, 3, 4}) // every difference 1
	if r.P != 0 || r.T != math.MaxFloat64 || r.DF != 2 || r.Diff != 1 {
		t.Errorf("constant differences: %+v", r)
	}
	r, _ = grpo.Paired([]float64{1, 2, 3}, []float64{1, 2, 3})
	if r.P != 1 || r.T != 0 || r.Diff != 0 {
		t.Errorf("no differences: %+v", r)
	}
}

// TestHolm checks by hand (and R's p.adjust(c(0.01, 0.04, 0.03, 0.005),
// "holm") = 0.03 0.06 0.06 0.02): sorted 0.005, 0.01, 0.03, 0.04 times
// 4, 3, 2, 1 is 0.02, 0.03, 0.06, 0.04, made non-decreasing: 0.04 -> 0.06.
func TestHolm(t *testing.T) {
	got := grpo.Holm([]float64{0.01, 0.04, 0.03, 0.005})
	want := []float64{0.03, 0.06, 0.06, 0.02}
	for i := range want {
		near(t, "holm", got[i], want[i], 1e-12)
	}
	// Capped at 1; a single p is unchanged; none gives none.
	if got := grpo.Holm([]float64{0.6, 0.5}); got[0] != 1 || got[1] != 1 {
		t.Errorf("Holm(0.6, 0.5)=%v, want [1 1]", got)
	}
	if got := grpo.Holm([]float64{0.2}); got[0] != 0.2 {
		t.Errorf("Holm(0.2)=%v", got)
	}
	if got := grpo.Holm(nil); len(got) != 0 {
		t.Errorf("Holm(nil)=%v", got)
	}
}
