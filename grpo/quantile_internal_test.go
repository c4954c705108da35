package grpo

import (
	"math"
	"testing"
)

// TestQuantile checks the bootstrap's percentiles against numpy's default
// (and R's type 7), by hand: position q·(n-1). On the 10000 values 0..9999
// (a bootstrap's sorted means), 2.5% is at 249.975 and 97.5% at 9749.025:
// as many resamples lie above the upper bound as below the lower. (Taking
// the value at index int(q·n) gave 250 and 9750: 250 below the lower
// bound, 249 above the upper.) numpy.percentile([1, 2, 4, 8], [0, 25, 50,
// 100]) = 1, 1.75, 3, 8.
func TestQuantile(t *testing.T) {
	xs := make([]float64, 10000)
	for i := range xs {
		xs[i] = float64(i)
	}
	for _, tt := range []struct {
		xs      []float64
		q, want float64
	}{
		{xs, 0.025, 249.975},
		{xs, 0.975, 9749.025},
		{[]float64{1, 2, 4, 8}, 0, 1},
		{[]float64{1, 2, 4, 8}, 0.25, 1.75},
		{[]float64{1, 2, 4, 8}, 0.5, 3},
		{[]float64{1, 2, 4, 8}, 1, 8},
		{[]float64{5}, 0.975, 5},
	} {
		if got := quantile(tt.xs, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("quantile(%d values, %v) = %v, want %v", len(tt.xs), tt.q, got, tt.want)
		}
	}
}
