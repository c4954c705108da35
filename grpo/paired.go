package grpo

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// PairedResult is the outcome of a paired t-test of b against a: the two
// samples measured the same units (tables) in the same order.
type PairedResult struct {
	N      int        `json:"n"`      // pairs
	Diff   float64    `json:"diff"`   // mean(b_i - a_i)
	CI95   [2]float64 `json:"ci95"`   // Student t 95% interval of Diff
	Boot95 [2]float64 `json:"boot95"` // percentile bootstrap 95% interval of Diff
	T      float64    `json:"t"`
	DF     float64    `json:"df"` // N - 1
	P      float64    `json:"p"`  // two-sided
}

// BootstrapResamples is how many resamples Paired's bootstrap draws.
const BootstrapResamples = 10000

// Paired runs the paired t-test of mean(b_i - a_i), the test R's
// t.test(b, a, paired = TRUE) performs, and adds a percentile bootstrap
// CI of the mean difference (BootstrapResamples resamples from a fixed
// seed, so the same data give the same interval). a and b must have the
// same length.
//
// Degenerate inputs give finite results as Welch does: fewer than two
// pairs: T 0, DF 0, P 1, both CIs [Diff, Diff]; all differences equal:
// P 1 when they are 0, else P 0 and T ±math.MaxFloat64.
func Paired(a, b []float64) (PairedResult, error) {
	if len(a) != len(b) {
		return PairedResult{}, fmt.Errorf("paired test: %d values against %d; pairs need the same tables on both sides", len(a), len(b))
	}
	d := make([]float64, len(a))
	for i := range a {
		d[i] = b[i] - a[i]
	}
	n := len(d)
	mean, variance := meanVar(d)
	r := PairedResult{N: n, Diff: mean, P: 1}
	r.CI95 = [2]float64{mean, mean}
	r.Boot95 = r.CI95
	if n < 2 {
		return r, nil
	}
	r.DF = float64(n - 1)
	if variance == 0 {
		if mean != 0 {
			r.T, r.P = math.Copysign(math.MaxFloat64, mean), 0
		}
		return r, nil
	}
	se := math.Sqrt(variance / float64(n))
	r.T = mean / se
	dist := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: r.DF}
	r.P = min(1, 2*dist.Survival(math.Abs(r.T)))
	half := dist.Quantile(0.975) * se
	r.CI95 = [2]float64{mean - half, mean + half}
	r.Boot95 = bootstrapMeanCI(d, BootstrapResamples)
	return r, nil
}

// PairedHedgesG returns Hedges' g of b against a for paired samples (the
// same units, in the same order): the mean difference mean(b_i - a_i)
// standardised, as HedgesG does, by the pooled standard deviation of the
// two sides, s_p = sqrt((s_a² + s_b²)/2), so that it reads on the scale of
// an independent-groups g; not by the standard deviation of the
// differences (d_z, which is t/sqrt(n) and grows with the correlation of
// the sides). This is metafor's escalc(measure = "SMCRP") (Cousineau
// 2020). Its small-sample correction is J = 1 - 3/(4ν-1) with ν the
// degrees of freedom of s_p² from n correlated pairs,
//
//	ν = (n-1)(s_a² + s_b²)² / (s_a⁴ + s_b⁴ + 2·cov(a, b)²),
//
// which is SMCRP's 2(n-1)/(1+r²) when the two standard deviations are
// equal, n-1 when one side is constant, and never more than the 2(n-1) of
// two independent groups that HedgesG uses: pairing correlates the two
// variance estimates, so s_p² rests on fewer independent values.
//
// It returns 0 when the effect size is undefined: fewer than two pairs, or
// both sides constant (Paired reports whether such a difference is
// certain). a and b must have the same length.
func PairedHedgesG(a, b []float64) (float64, error) {
	if len(a) != len(b) {
		return 0, fmt.Errorf("paired effect size: %d values against %d; pairs need the same tables on both sides", len(a), len(b))
	}
	n := len(a)
	if n < 2 {
		return 0, nil
	}
	ma, va := meanVar(a)
	mb, vb := meanVar(b)
	if va+vb == 0 {
		return 0, nil
	}
	var cov float64
	for i := range a {
		cov += (a[i] - ma) * (b[i] - mb)
	}
	cov /= float64(n - 1)
	nu := float64(n-1) * (va + vb) * (va + vb) / (va*va + vb*vb + 2*cov*cov)
	j := 1 - 3/(4*nu-1)
	return (mb - ma) / math.Sqrt((va+vb)/2) * j, nil
}

// bootstrapMeanCI is the percentile bootstrap 95% interval of mean(d).
func bootstrapMeanCI(d []float64, resamples int) [2]float64 {
	rng := rand.New(rand.NewPCG(0x9e3779b97f4a7c15, uint64(len(d))))
	means := make([]float64, resamples)
	for i := range means {
		s := 0.0
		for range d {
			s += d[rng.IntN(len(d))]
		}
		means[i] = s / float64(len(d))
	}
	slices.Sort(means)
	return [2]float64{quantile(means, 0.025), quantile(means, 0.975)}
}

// quantile is the q-quantile of sorted xs, interpolated linearly between
// the order statistics around position q·(len-1): R's quantile() default
// (type 7) and numpy's percentile, which scipy's percentile bootstrap
// uses. xs must not be empty.
func quantile(xs []float64, q float64) float64 {
	h := q * float64(len(xs)-1)
	i := int(h)
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	return xs[i] + (h-float64(i))*(xs[i+1]-xs[i])
}

// Holm adjusts p-values for multiple comparisons (Holm 1979), as R's
// p.adjust(p, "holm"): the i-th smallest of m values is multiplied by
// m-i+1, then made non-decreasing in that order and capped at 1. The
// result is in the order of ps.
func Holm(ps []float64) []float64 {
	m := len(ps)
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		switch {
		case ps[i] < ps[j]:
			return -1
		case ps[i] > ps[j]:
			return 1
		}
		return 0
	})
	out := make([]float64, m)
	running := 0.0
	for rank, i := range order {
		running = max(running, min(1, float64(m-rank)*ps[i]))
		out[i] = running
	}
	return out
}
