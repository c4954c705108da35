package bench

import (
	"testing"
	"time"
)

// TestCPUCeiling checks the ceiling against hand-computed values.
func TestCPUCeiling(t *testing.T) {
	cases := []struct {
		name string
		t    Throughput
		want float64
	}{
		// 50,000 calls x (90 + 40) us = 6.5 s of CPU over 2 cores = 3.25 s
		// at least, against an ideal of 1 s: 1/3.25.
		{"cpu-bound", Throughput{Calls: 50000, Ideal: time.Second, CPUPerCall: 90 * time.Microsecond,
			ServerCPUPerCall: 40 * time.Microsecond, Cores: 2}, 1 / 3.25},
		// 10,000 x 140 us / 2 = 0.7 s, under the 1 s ideal: not bound.
		{"not bound", Throughput{Calls: 10000, Ideal: time.Second, CPUPerCall: 100 * time.Microsecond,
			ServerCPUPerCall: 40 * time.Microsecond, Cores: 2}, 1},
		// An in-process server: its CPU is in CPUPerCall. 10,000 x 300 us
		// / 2 = 1.5 s: 1/1.5.
		{"server in process", Throughput{Calls: 10000, Ideal: time.Second, CPUPerCall: 300 * time.Microsecond, Cores: 2}, 1 / 1.5},
		// Four cores halve the 3.25 s: 1/1.625.
		{"four cores", Throughput{Calls: 50000, Ideal: time.Second, CPUPerCall: 90 * time.Microsecond,
			ServerCPUPerCall: 40 * time.Microsecond, Cores: 4}, 1 / 1.625},
		{"cores unknown", Throughput{Calls: 10000, Ideal: time.Second, CPUPerCall: 100 * time.Microsecond}, 0},
		{"no calls", Throughput{Ideal: time.Second, CPUPerCall: 100 * time.Microsecond, Cores: 2}, 0},
	}
	for _, c := range cases {
		if got := c.t.CPUCeiling(); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("%s: CPUCeiling = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestRolloutResultsCeiling: the table carries the ceiling when it is
// known, and leaves it out when it is not.
func TestRolloutResultsCeiling(t *testing.T) {
	tp := Throughput{Agents: 10000, N: 5, Rounds: 5, Episodes: 2000, Calls: 50000, Ideal: time.Second,
		Wall: 4 * time.Second, CPUPerCall: 90 * time.Microsecond, ServerCPUPerCall: 40 * time.Microsecond, Cores: 2, TimeWait: -1}
	var got []float64
	for _, r := range rolloutResults("rollout", tp) {
		if r.Metric == "cpu-bound ceiling" {
			got = append(got, r.Value)
		}
	}
	if len(got) != 1 || got[0] < 0.3076 || got[0] > 0.3077 {
		t.Errorf("cpu-bound ceiling lines = %v, want one of 1/3.25", got)
	}
	tp.Cores = 0
	for _, r := range rolloutResults("rollout", tp) {
		if r.Metric == "cpu-bound ceiling" {
			t.Errorf("a ceiling printed with the cores unknown: %v", r)
		}
	}
}
