package trainer

import "testing"

func TestRetryID(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"dp5/step-0003", "dp5/step-0003-retry-2"},
		{"dp5/step-0003-retry-2", "dp5/step-0003-retry-3"},
		{"dp5/step-0003-retry-9", "dp5/step-0003-retry-10"},
		{"dp5.3f9a/step-0012-retry-10", "dp5.3f9a/step-0012-retry-11"},
		// Not an attempt number: a suffix like it in a run's name stays.
		{"a-retry-x/step-0001", "a-retry-x/step-0001-retry-2"},
		{"a/step-0001-retry-1", "a/step-0001-retry-1-retry-2"},
	} {
		if got := RetryID(c.id); got != c.want {
			t.Errorf("RetryID(%q) = %q, want %q", c.id, got, c.want)
		}
	}
}
