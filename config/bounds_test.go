package config_test

import (
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
)

func TestBoundCheck(t *testing.T) {
	b := config.Bound[int]{Min: 1, Max: 8, Low: "need at least 1 slot", High: "slots (why)"}
	for v, want := range map[int]string{0: "need at least 1 slot", 1: "", 8: "", 9: "at most 8 slots (why)", -5: "need at least 1 slot"} {
		if got := b.Check(v); got != want {
			t.Errorf("Check(%d)=%q, want %q", v, got, want)
		}
	}
	// A duration's maximum is written as a config writes it.
	for max, want := range map[time.Duration]string{24 * time.Hour: "24h", 2 * time.Minute: "2m", 90 * time.Minute: "1h30m", 10 * time.Second: "10s", 1500 * time.Millisecond: "1.5s"} {
		if got := (config.Bound[time.Duration]{Max: max}).MaxString(); got != want {
			t.Errorf("MaxString(%v)=%q, want %q", max, got, want)
		}
	}
}
