package grpo_test

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/grpo-dev/grpo/grpo"
)

// R's built-in sleep data set: extra sleep (hours) under two drugs.
var (
	sleep1 = []float64{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0}
	sleep2 = []float64{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4}
)

func near(tb testing.TB, name string, got, want, tol float64) {
	tb.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		tb.Errorf("%s=%.10g, want %.10g (±%g)", name, got, want, tol)
	}
}

func TestSummarize(t *testing.T) {
	t.Run("OneToFive", func(t *testing.T) {
		// mean 3, sd sqrt(10/4) = 1.5811388; t(0.975, 4) = 2.7764451;
		// half width 2.7764451*1.5811388/sqrt(5) = 1.9632432.
		// R: t.test(1:5)$conf.int = 1.036757 4.963243.
		s := grpo.Summarize([]float64{1, 2, 3, 4, 5})
		if got, want := s.N, 5; got != want {
			t.Fatalf("N=%d, want %d", got, want)
		}
		near(t, "Mean", s.Mean, 3, 1e-12)
		near(t, "Std", s.Std, 1.5811388300841898, 1e-12)
		near(t, "CI95[0]", s.CI95[0], 1.036757, 5e-7)
		near(t, "CI95[1]", s.CI95[1], 4.963243, 5e-7)
	})
	t.Run("Sleep", func(t *testing.T) {
		// sum of squared deviations from 0.75 is 28.805, so sd = sqrt(28.805/9).
		s := grpo.Summarize(sleep1)
		near(t, "Mean", s.Mean, 0.75, 1e-12)
		near(t, "Std", s.Std, math.Sqrt(28.805/9), 1e-12)
	})
	for _, tt := range []struct {
		name string
		xs   []float64
		want grpo.Summary
	}{
		{"Empty", nil, grpo.Summary{}},
		{"One", []float64{2.5}, grpo.Summary{N: 1, Mean: 2.5, CI95: [2]float64{2.5, 2.5}}},
		{"Constant", []float64{0.1, 0.1, 0.1}, grpo.Summary{N: 3, Mean: 0.1, CI95: [2]float64{0.1, 0.1}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := grpo.Summarize(tt.xs); got != tt.want {
				t.Fatalf("Summarize(%v)=%+v, want %+v", tt.xs, got, tt.want)
			}
		})
	}
}

func TestWelch(t *testing.T) {
	for _, tt := range []struct {
		name           string
		a, b           []float64
		diff, t, df, p float64
		lo, hi         float64
		tolT, tolDF    float64
		tolP, tolCI    float64
	}{
		{
			// Hand computation: means 2 and 4, variances 1 and 1, so
			// se^2 = 1/3+1/3 = 2/3, t = 2/sqrt(2/3) = sqrt(6), df =
			// (2/3)^2 / ((1/3)^2/2 + (1/3)^2/2) = 4. Student t with 4 df has
			// CDF 1/2 + (3/8) u (1 - v/12), u = t/sqrt(1+t^2/4), v = t^2/(1+t^2/4);
			// at t^2 = 6: u = 1.5491933, v = 2.4, CDF = 0.9647580, p = 0.0704839.
			// CI: 2 ± 2.7764451*sqrt(2/3). R: t.test(c(3,4,5), c(1,2,3)) p = 0.07048.
			name: "Hand", a: []float64{1, 2, 3}, b: []float64{3, 4, 5},
			diff: 2, t: math.Sqrt(6), df: 4, p: 0.0704839,
			lo: 2 - 2.7764451*math.Sqrt(2.0/3), hi: 2 + 2.7764451*math.Sqrt(2.0/3),
			tolT: 1e-12, tolDF: 1e-12, tolP: 1e-7, tolCI: 1e-7,
		},
		{
			// R: t.test(extra ~ group, data = sleep), the classic example:
			// t = -1.8608, df = 17.776, p-value = 0.07939,
			// 95 percent CI -3.3654832 0.2054832 (group 1 minus group 2).
			name: "Sleep", a: sleep1, b: sleep2,
			diff: 1.58, t: 1.8608, df: 17.776, p: 0.07939,
			lo: -0.2054832, hi: 3.3654832,
			tolT: 5e-5, tolDF: 5e-4, tolP: 5e-6, tolCI: 5e-8,
		},
		{
			// R's ?t.test example: t.test(1:10, y = c(7:20)):
			// t = -5.4349, df = 21.982, p-value = 1.855e-05,
			// 95 percent CI -11.052802 -4.947198.
			// By hand: var(1:10) = 110/12, var(7:20) = 210/12, se^2 = 11/12 + 5/4
			// = 13/6, t = 8/sqrt(13/6) = 5.434929.
			name: "RHelp", a: seq(1, 10), b: seq(7, 20),
			diff: 8, t: 8 / math.Sqrt(13.0/6), df: 21.982, p: 1.855e-05,
			lo: 4.947198, hi: 11.052802,
			tolT: 1e-12, tolDF: 5e-4, tolP: 5e-9, tolCI: 5e-7,
		},
		{
			// The same help page, with an outlier: t.test(1:10, y = c(7:20, 200)):
			// t = -1.6329, df = 14.165, p-value = 0.1245,
			// 95 percent CI -47.242900 6.376233.
			name: "RHelpOutlier", a: seq(1, 10), b: append(seq(7, 20), 200),
			diff: 389.0/15 - 5.5, t: 1.6329, df: 14.165, p: 0.1245,
			lo: -6.376233, hi: 47.242900,
			tolT: 5e-5, tolDF: 5e-4, tolP: 5e-5, tolCI: 5e-7,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := grpo.Welch(tt.a, tt.b)
			near(t, "Diff", r.Diff, tt.diff, 1e-12)
			near(t, "T", r.T, tt.t, tt.tolT)
			near(t, "DF", r.DF, tt.df, tt.tolDF)
			near(t, "P", r.P, tt.p, tt.tolP)
			near(t, "CI95[0]", r.CI95[0], tt.lo, tt.tolCI)
			near(t, "CI95[1]", r.CI95[1], tt.hi, tt.tolCI)

			// Swapping the groups flips the sign and keeps the p-value.
			s := grpo.Welch(tt.b, tt.a)
			near(t, "swapped T", s.T, -r.T, 1e-12)
			near(t, "swapped P", s.P, r.P, 1e-12)
			near(t, "swapped CI95[0]", s.CI95[0], -r.CI95[1], 1e-9)
		})
	}
}

func TestWelch_Degenerate(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b []float64
		want grpo.WelchResult
	}{
		{"Empty", nil, nil, grpo.WelchResult{P: 1}},
		{"OneValue", []float64{1}, []float64{2, 3}, grpo.WelchResult{Diff: 1.5, CI95: [2]float64{1.5, 1.5}, P: 1}},
		{"EqualConstants", []float64{0.1, 0.1, 0.1}, []float64{0.1, 0.1, 0.1, 0.1}, grpo.WelchResult{DF: 5, P: 1}},
		{"DifferentConstants", []float64{1, 1}, []float64{3, 3, 3}, grpo.WelchResult{
			Diff: 2, CI95: [2]float64{2, 2}, T: math.MaxFloat64, DF: 3, P: 0,
		}},
		{"DifferentConstantsBelow", []float64{3, 3}, []float64{1, 1}, grpo.WelchResult{
			Diff: -2, CI95: [2]float64{-2, -2}, T: -math.MaxFloat64, DF: 2, P: 0,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := grpo.Welch(tt.a, tt.b)
			if got != tt.want {
				t.Fatalf("Welch(%v, %v)=%+v, want %+v", tt.a, tt.b, got, tt.want)
			}
			if _, err := json.Marshal(got); err != nil {
				t.Fatalf("marshal %+v: %v", got, err)
			}
		})
	}
	t.Run("OneConstantGroup", func(t *testing.T) {
		// a is constant, so se^2 = var(b)/3 = 1/3 and df = nb-1 = 2.
		r := grpo.Welch([]float64{0, 0, 0}, []float64{1, 2, 3})
		near(t, "T", r.T, 2/math.Sqrt(1.0/3), 1e-12)
		near(t, "DF", r.DF, 2, 1e-12)
	})
}

func TestHedgesG(t *testing.T) {
	for _, tt := range []struct {
		name string
		a, b []float64
		want float64
		tol  float64
	}{
		// Variances 1 and 1, pooled sd 1, d = 2, J = 1 - 3/(4*6-9) = 0.8.
		{"Hand", []float64{1, 2, 3}, []float64{3, 4, 5}, 1.6, 1e-12},
		{"HandReversed", []float64{3, 4, 5}, []float64{1, 2, 3}, -1.6, 1e-12},
		// Pooled variance (28.805 + 36.081)/18, d = 1.58/sqrt(3.6047778) =
		// 0.8321811, J = 1 - 3/71; R effsize::cohen.d(extra ~ group, sleep,
		// hedges.correction = TRUE) gives -0.7970185 (group 1 vs group 2).
		{"Sleep", sleep1, sleep2, 0.7970185, 5e-8},
		// Unequal sizes: a var 1 (n 3), b = {0, 4} var 8 (n 2); pooled
		// (2*1 + 1*8)/3 = 10/3; d = (2-2)/.. = 0.
		{"NoDifference", []float64{1, 2, 3}, []float64{0, 4}, 0, 1e-12},
		// a var 1 (n 3), b = {6, 8} var 2 (n 2): pooled (2+2)/3 = 4/3,
		// d = (7-2)/sqrt(4/3) = 4.3301270, J = 1 - 3/11 = 8/11.
		{"UnequalSizes", []float64{1, 2, 3}, []float64{6, 8}, 5 / math.Sqrt(4.0/3) * 8 / 11, 1e-12},
		{"Empty", nil, []float64{1, 2}, 0, 0},
		{"TooFew", []float64{1}, []float64{2}, 0, 0},
		{"Constant", []float64{1, 1}, []float64{2, 2}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			near(t, "HedgesG", grpo.HedgesG(tt.a, tt.b), tt.want, tt.tol)
		})
	}
}

// seq returns the integers lo..hi as float64s.
func seq(lo, hi int) []float64 {
	var xs []float64
	for i := lo; i <= hi; i++ {
		xs = append(xs, float64(i))
	}
	return xs
}
