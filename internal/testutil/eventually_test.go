package testutil

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestEventually: a condition that comes true after 30s is seen; one that
// never does is given up on at Patience, not before (synctest's clock).
func TestEventually(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ready atomic.Bool
		time.AfterFunc(30*time.Second, func() { ready.Store(true) })
		start := time.Now()
		if !Eventually(ready.Load) {
			t.Fatal("Eventually missed a condition that came true after 30s")
		}
		if got := time.Since(start); got < 30*time.Second || got > 30*time.Second+10*time.Millisecond {
			t.Fatalf("Eventually returned %s after the start, want 30s to 30.01s", got)
		}
		start = time.Now()
		if Eventually(func() bool { return false }) {
			t.Fatal("Eventually reported a condition that never held")
		}
		if got := time.Since(start); got < Patience {
			t.Fatalf("Eventually gave up after %s, before Patience %s", got, Patience)
		}
	})
}
