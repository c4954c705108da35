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

// TestPairedHedgesG checks by hand: g = mean(b - a) / s_p · J, s_p² =
// (s_a² + s_b²)/2, J = 1 - 3/(4ν - 1), ν = (n-1)(s_a²+s_b²)² / (s_a⁴ +
// s_b⁴ + 2 cov²). The sleep figure was computed with numpy from the same
// formula (r = 0.7951702, ν = 10.996266; metafor's SMCRP ν = 2·9/(1+r²)
// = 11.027414 assumes equal SDs, which these are not).
func TestPairedHedgesG(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b []float64
		want float64
	}{
		// s_a² = s_b² = 1, cov 0.5 (r = 0.5): ν = 2·4/(1+1+0.5) = 3.2 =
		// SMCRP's 2·2/(1+0.25); d = 1/1; J = 1 - 3/11.8. Independent
		// groups (HedgesG) would take ν = 4: J = 0.8.
		{"EqualSDs", []float64{1, 2, 3}, []float64{2, 4, 3}, 1 - 3/11.8},
		{"EqualSDsReversed", []float64{2, 4, 3}, []float64{1, 2, 3}, -(1 - 3/11.8)},
		// s_a² 1, s_b² 3, cov 1.5: ν = 2·16/(1+9+4.5) = 32/14.5; J = 1 -
		// 43.5/113.5 = 70/113.5; d = 2/sqrt(2).
		{"UnequalSDs", []float64{1, 2, 3}, []float64{3, 3, 6}, 2 / math.Sqrt(2) * 70 / 113.5},
		// a constant: ν = n-1 = 2, J = 4/7; d = 1/sqrt(1/2).
		{"OneSideConstant", []float64{1, 1, 1}, []float64{1, 2, 3}, math.Sqrt(2) * 4 / 7},
		{"Sleep", sleep1, sleep2, 0.7741017630733970},
		{"OnePair", []float64{1}, []float64{2}, 0},
		{"BothConstant", []float64{1, 1}, []float64{2, 2}, 0},
		{"Empty", nil, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g, err := grpo.PairedHedgesG(tt.a, tt.b)
			if err != nil {
				t.Fatal(err)
			}
			near(t, "PairedHedgesG", g, tt.want, 1e-12)
		})
	}
	if _, err := grpo.PairedHedgesG([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("PairedHedgesG of 2 against 1 values: no error")
	}
}
