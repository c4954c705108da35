package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
)

// TestSignalExitStatus: a run stopped by Ctrl-C (SIGINT) or SIGTERM stops
// gracefully — the run is recorded interrupted, with how to resume it —
// and exits as shells report a signal: 130 and 143.
func TestSignalExitStatus(t *testing.T) {
	bin := buildBinary(t)
	for _, c := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGINT, 130}, {syscall.SIGTERM, 143}} {
		db := filepath.Join(t.TempDir(), "s.db")
		cmd := exec.Command(bin, "run", "--steps", "500", "--db", db)
		var stderr testutil.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first committed step, then signal.
		if !testutil.Eventually(func() bool { return strings.Contains(stderr.String(), "committed") }) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("no step committed within %s: %s", testutil.Patience, stderr.String())
		}
		cmd.Process.Signal(c.sig)
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.want {
			t.Errorf("%v: %v, want exit status %d\n%s", c.sig, err, c.want, stderr.String())
		}
		if !strings.Contains(stderr.String(), "grpo run --resume") {
			t.Errorf("%v: the run's interruption does not say how to resume it:\n%s", c.sig, stderr.String())
		}
	}
}
