//go:build !race

// The race detector keeps shadow memory for every heap page the program
// touched, resident after the heap gives the pages back, so a peak RSS
// measured under -race counts memory freed long before. .ci/run runs this
// file's test without -race.

package bench

import (
	"runtime"
	"testing"
)

// TestPeakRSSStartsFromLiveMemory: a measurement's peak resident set
// starts from what is live, not from the resident heap an earlier,
// larger measurement left behind.
func TestPeakRSSStartsFromLiveMemory(t *testing.T) {
	if !resetPeakRSS() {
		t.Skip("this kernel cannot reset the peak resident set size")
	}
	const big = 256 << 20
	b := make([]byte, big)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1 // make it resident
	}
	runtime.KeepAlive(b)
	b = nil
	m := startMeter("")
	m.stop()
	var tp Throughput
	m.fill(&tp)
	if tp.PeakRSS == 0 {
		t.Skip("peak RSS unknown here")
	}
	if tp.PeakRSS > big/2 {
		t.Errorf("peak RSS of a measurement that allocated nothing = %d MB; the %d MB dropped before it still counts",
			tp.PeakRSS>>20, big>>20)
	}
}
