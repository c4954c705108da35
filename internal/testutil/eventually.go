// Package testutil holds what tests of several packages share.
package testutil

import "time"

// Patience is how long Eventually waits: long enough for a loaded machine
// running several test binaries under -race, so that a test fails only
// when what it waits for does not happen.
const Patience = time.Minute

// Eventually reports whether cond holds within Patience, asking it every
// 10ms; the caller fails the test with what it waited for when it did
// not:
//
//	if !testutil.Eventually(func() bool { return done.Load() }) {
//		t.Fatalf("the job did not finish within %s", testutil.Patience)
//	}
func Eventually(cond func() bool) bool {
	deadline := time.Now().Add(Patience)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
