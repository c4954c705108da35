package orchestrator

import "testing"

func TestStale(t *testing.T) {
	for _, tc := range []struct {
		step, policy, k int
		want            bool
	}{
		{step: 3, policy: 2, k: 0, want: false}, // synchronous
		{step: 3, policy: 1, k: 0, want: true},
		{step: 3, policy: 1, k: 1, want: false},
		{step: 3, policy: 0, k: 1, want: true},
		{step: 5, policy: 2, k: 2, want: false},
		{step: 1, policy: 0, k: 0, want: false},
	} {
		if got := stale(tc.step, tc.policy, tc.k); got != tc.want {
			t.Errorf("stale(step %d, policy %d, k %d) = %v, want %v", tc.step, tc.policy, tc.k, got, tc.want)
		}
	}
}
