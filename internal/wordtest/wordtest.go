// Package wordtest checks functions that look at eight bytes at a time
// (a little-endian 64-bit word) and count how many of its first bytes
// belong to a class: for tests only.
package wordtest

import "testing"

// EveryByte calls count with words whose bytes before pos all belong to
// the class (filled from fill, which must), whose byte at pos is each of
// the 256 values, and whose later bytes vary; it fails t unless count
// returns the number of leading bytes in the class, as in reports.
func EveryByte(t *testing.T, name string, fill string, in func(byte) bool, count func(w []byte) int) {
	t.Helper()
	for pos := range 8 {
		for c := range 256 {
			w := []byte(fill[:8])
			w[pos] = byte(c)
			for k := pos + 1; k < 8; k++ {
				w[k] = byte(c*7 + k*31) // anything after
			}
			want := 0
			for want < 8 && in(w[want]) {
				want++
			}
			if got := count(w); got != want {
				t.Fatalf("%s(%q) = %d, want %d", name, w, got, want)
			}
		}
	}
}
