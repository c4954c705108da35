package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS resets the kernel's peak resident set size of this process
// (Linux: "5" into /proc/self/clear_refs), so peakRSS measures from now.
// It reports whether that worked.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS is the process's peak resident set size in bytes (VmHWM), 0
// when unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			f := strings.Fields(string(v))
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// timeWait counts loopback TCP connections in TIME_WAIT with port at
// either end (Linux /proc/net/tcp{,6}); -1 when unknown.
func timeWait(port int) int {
	n, known := 0, false
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		known = true
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 4 || fs[3] != "06" {
				continue
			}
			if strings.HasSuffix(fs[1], want) || strings.HasSuffix(fs[2], want) {
				n++
			}
		}
		fh.Close()
	}
	if !known {
		return -1
	}
	return n
}
