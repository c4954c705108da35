package grpo

import (
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Every result in this file is finite, so it can be stored and served as JSON
// (encoding/json rejects NaN and ±Inf).

// Summary describes a sample: its size, mean, sample standard deviation
// (n-1 denominator), and the two-sided 95% Student t confidence interval of
// the mean.
type Summary struct {
	N    int        `json:"n"`
	Mean float64    `json:"mean"`
	Std  float64    `json:"std"`
	CI95 [2]float64 `json:"ci95"`
}

// Summarize returns the Summary of xs: CI95 is mean ± t(0.975, n-1)·std/√n.
// With fewer than two values Std is 0 and CI95 is [mean, mean]; an empty
// sample has mean 0.
func Summarize(xs []float64) Summary {
	n := len(xs)
	mean, variance := meanVar(xs)
	s := Summary{N: n, Mean: mean, Std: math.Sqrt(variance), CI95: [2]float64{mean, mean}}
	if n < 2 {
		return s
	}
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(n - 1)}.Quantile(0.975)
	half := t * s.Std / math.Sqrt(float64(n))
	s.CI95 = [2]float64{mean - half, mean + half}
	return s
}

// WelchResult is the outcome of Welch's unequal-variance t-test of b against a.
type WelchResult struct {
	Diff float64    `json:"diff"` // mean(b) - mean(a)
	CI95 [2]float64 `json:"ci95"` // Welch 95% confidence interval of Diff
	T    float64    `json:"t"`
	DF   float64    `json:"df"` // Welch–Satterthwaite degrees of freedom
	P    float64    `json:"p"`  // two-sided
}

// Welch runs Welch's two-sample t-test of mean(b) - mean(a), the test R's
// t.test(b, a) performs by default.
//
// Degenerate inputs give finite, documented results instead of NaN:
//   - a group with fewer than two values (no variance estimate): T 0, DF 0,
//     P 1, CI95 [Diff, Diff];
//   - both groups constant and equal (zero variance, Diff 0): T 0, P 1;
//   - both groups constant and different: the difference is certain, so P 0
//     and T is ±math.MaxFloat64 (the sign of Diff).
//
// In both zero-variance cases DF is len(a)+len(b)-2 and CI95 is [Diff, Diff].
func Welch(a, b []float64) WelchResult {
	na, nb := float64(len(a)), float64(len(b))
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	r := WelchResult{Diff: mb - ma, P: 1}
	r.CI95 = [2]float64{r.Diff, r.Diff}
	if len(a) < 2 || len(b) < 2 {
		return r
	}
	sa, sb := va/na, vb/nb
	se2 := sa + sb
	if se2 == 0 {
		r.DF = na + nb - 2
		if r.Diff != 0 {
			r.T = math.Copysign(math.MaxFloat64, r.Diff)
			r.P = 0
		}
		return r
	}
	se := math.Sqrt(se2)
	r.T = r.Diff / se
	r.DF = se2 * se2 / (sa*sa/(na-1) + sb*sb/(nb-1))
	dist := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: r.DF}
	r.P = min(1, 2*dist.Survival(math.Abs(r.T)))
	half := dist.Quantile(0.975) * se
	r.CI95 = [2]float64{r.Diff - half, r.Diff + half}
	return r
}

// HedgesG returns Hedges' g of b against a: Cohen's d with the pooled
// standard deviation, (mean(b)-mean(a))/s_pooled, times the small-sample
// correction J = 1 - 3/(4(na+nb)-9).
//
// It returns 0 when the effect size is undefined: fewer than three values in
// all, an empty group, or a pooled standard deviation of zero (constant
// groups; Welch reports whether such a difference is certain).
func HedgesG(a, b []float64) float64 {
	na, nb := len(a), len(b)
	if na == 0 || nb == 0 || na+nb < 3 {
		return 0
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	pooled := (float64(na-1)*va + float64(nb-1)*vb) / float64(na+nb-2)
	if pooled == 0 {
		return 0
	}
	j := 1 - 3/float64(4*(na+nb)-9)
	return (mb - ma) / math.Sqrt(pooled) * j
}

func meanVar(xs []float64) (mean, variance float64) {
	switch {
	case len(xs) == 0:
		return 0, 0
	case constant(xs):
		return xs[0], 0
	}
	return stat.MeanVariance(xs, nil)
}

// constant reports whether every value of xs is exactly xs[0].
func constant(xs []float64) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return true
}
