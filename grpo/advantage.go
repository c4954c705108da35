package grpo

import (
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"
)

// Std is the kind of standard deviation that normalises advantages.
type Std string

// Accepted values of AdvantageOptions.Std.
const (
	StdPopulation Std = "population" // n denominator
	StdUnbiased   Std = "unbiased"   // n-1 denominator
)

// Stds lists the accepted values of Std.
var Stds = []Std{StdPopulation, StdUnbiased}

// ParseStd accepts the names in Stds.
func ParseStd(s string) (Std, error) { return parseName(s, Stds) }

// Baseline is what an episode's reward is compared to within its group.
type Baseline string

// Accepted values of AdvantageOptions.Baseline.
const (
	BaselineMean        Baseline = "mean"          // the group mean
	BaselineLeaveOneOut Baseline = "leave-one-out" // RLOO: the mean of the others
)

// Baselines lists the accepted values of Baseline.
var Baselines = []Baseline{BaselineMean, BaselineLeaveOneOut}

// ParseBaseline accepts the names in Baselines.
func ParseBaseline(s string) (Baseline, error) { return parseName(s, Baselines) }

func parseName[T ~string](s string, accepted []T) (T, error) {
	if v := T(s); slices.Contains(accepted, v) {
		return v, nil
	}
	names := make([]string, len(accepted))
	for i, a := range accepted {
		names[i] = string(a)
	}
	return "", fmt.Errorf("%q is not accepted; accepted: %s", s, strings.Join(names, ", "))
}

// AdvantageEpsilon is added to the group standard deviation before dividing
// by it, as in GRPO.
const AdvantageEpsilon = 1e-6

// zeroVarianceTolerance is the spread under which a group counts as constant.
const zeroVarianceTolerance = 1e-9

// AdvantageOptions chooses the advantage estimator for a group of episode
// rewards.
type AdvantageOptions struct {
	// StdNormalize divides by the group standard deviation (GRPO); false
	// leaves the centred rewards unscaled (Dr. GRPO).
	StdNormalize bool `json:"std_normalize" yaml:"std_normalize"`
	// Std is the standard deviation used when normalising: "population"
	// (n denominator) or "unbiased" (n-1).
	Std Std `json:"std" yaml:"std"`
	// Baseline is "mean" (the group mean) or "leave-one-out" (RLOO: the mean
	// of the other rewards in the group).
	Baseline Baseline `json:"baseline" yaml:"baseline"`
}

// DefaultAdvantageOptions returns GRPO's estimator: group-mean baseline,
// divided by the population standard deviation.
func DefaultAdvantageOptions() AdvantageOptions {
	return AdvantageOptions{StdNormalize: true, Std: StdPopulation, Baseline: BaselineMean}
}

// Validate reports an error naming the first field that holds a value other
// than the accepted ones.
func (o AdvantageOptions) Validate() error {
	if _, err := ParseStd(string(o.Std)); err != nil {
		return fmt.Errorf("advantage std %q: accepted values are %q", o.Std, Stds)
	}
	if _, err := ParseBaseline(string(o.Baseline)); err != nil {
		return fmt.Errorf("advantage baseline %q: accepted values are %q", o.Baseline, Baselines)
	}
	return nil
}

// Advantages returns the advantage of each reward in one group, in order.
//
// With the mean baseline, advantage i is r_i - mean; with leave-one-out it
// is r_i minus the mean of the other rewards. When opt.StdNormalize is set
// the result is divided by (std + AdvantageEpsilon), std being the whole
// group's standard deviation of the kind opt.Std names.
//
// A group of one, and any group for which ZeroVariance holds, gets all-zero
// advantages: it carries no signal, and exact zeros let callers drop those
// trajectories instead of sending rounding noise. opt should have passed
// Validate; an unrecognised Std acts as "population" and an unrecognised
// Baseline as "mean".
func Advantages(rewards []float64, opt AdvantageOptions) []float64 {
	n := len(rewards)
	adv := make([]float64, n)
	if n < 2 || ZeroVariance(rewards) {
		return adv
	}
	var mean, std float64
	if opt.Std == StdUnbiased {
		mean, std = stat.MeanStdDev(rewards, nil)
	} else {
		mean, std = stat.PopMeanStdDev(rewards, nil)
	}
	// r_i minus the mean of the others is n/(n-1) times r_i minus the mean.
	scale := 1.0
	if opt.Baseline == BaselineLeaveOneOut {
		scale = float64(n) / float64(n-1)
	}
	if opt.StdNormalize {
		scale /= std + AdvantageEpsilon
	}
	for i, r := range rewards {
		adv[i] = (r - mean) * scale
	}
	return adv
}

// ZeroVariance reports whether all rewards are equal within 1e-9, so the
// group carries no learning signal. Empty and single-reward groups count as
// zero-variance.
func ZeroVariance(rewards []float64) bool {
	if len(rewards) == 0 {
		return true
	}
	lo, hi := rewards[0], rewards[0]
	for _, r := range rewards[1:] {
		lo, hi = min(lo, r), max(hi, r)
	}
	return hi-lo <= zeroVarianceTolerance
}
