package checkpoint

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateRunName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"dp5-shaped-1", true},
		{"a", true},
		{"A.b_c-9", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{".", false},
		{"..", false},
		{".hidden", false},
		{"-flag", false},
		{"_x", false},
		{"a/b", true},
		{"checkpoint-discipline/shaped/12", true},
		{"a/", false},
		{"/a", false},
		{"a//b", false},
		{"a/../b", false},
		{"a/./b", false},
		{"a/.b", false},
		{"a\\b", false},
		{"a b", false},
		{"a\x00", false},
		{"café", false},
		// A run's data directory holds the embedded backend's jobs/ and
		// adapters/: no run may be named into them.
		{"jobs", false},
		{"adapters", false},
		{"a/jobs", false},
		{"adapters/x", false},
		{"a/jobs2", true},
		{"my-adapters", true},
	} {
		err := ValidateRunName(tt.name)
		if got := err == nil; got != tt.ok {
			t.Errorf("ValidateRunName(%q)=%v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrRunName) {
			t.Errorf("ValidateRunName(%q)=%v, want it to match ErrRunName", tt.name, err)
		}
	}
}

func TestParsePolicyAndMetric(t *testing.T) {
	for _, p := range Policies {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("ParsePolicy(%q)=%q, %v", p, got, err)
		}
	}
	for _, m := range MetricNames {
		if got, err := ParseMetric(string(m)); err != nil || got != m {
			t.Errorf("ParseMetric(%q)=%q, %v", m, got, err)
		}
	}
	if _, err := ParsePolicy("first"); err == nil || err.Error() != `"first" is not accepted; accepted: best-validation, best-train, last` {
		t.Errorf("ParsePolicy(first)=%v", err)
	}
	if _, err := ParseMetric(""); err == nil || err.Error() != `"" is not accepted; accepted: reward_mean, meals_mean, deadlock_rate` {
		t.Errorf("ParseMetric(\"\")=%v", err)
	}
	e := Evaluation{RewardMean: 0.5, MealsMean: 2, DeadlockRate: 0.25}
	for _, tt := range []struct {
		m        Metric
		want     float64
		minimize bool
	}{
		{MetricRewardMean, 0.5, false},
		{MetricMealsMean, 2, false},
		{MetricDeadlockRate, 0.25, true},
	} {
		if got := tt.m.Of(e); got != tt.want {
			t.Errorf("%s.Of()=%v, want %v", tt.m, got, tt.want)
		}
		if got := tt.m.Minimized(); got != tt.minimize {
			t.Errorf("%s.Minimized()=%v, want %v", tt.m, got, tt.minimize)
		}
	}
}
