package main

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestEvalProfiles: `grpo eval --cpuprofile --memprofile` writes both
// profiles (gzipped protobuf, what go tool pprof reads), and a profile
// that cannot be written is refused before anything runs.
func TestEvalProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	code, out, errs := cli(t, "eval", "--n", "5", "--episodes", "2", "--json", "--cpuprofile", cpu, "--memprofile", mem)
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s", code, errs)
	}
	if !strings.Contains(out, `"deadlock_rate"`) {
		t.Fatalf("eval printed no summary with profiles on: %s", out)
	}
	for _, p := range []string{cpu, mem} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: not a profile: %v", p, err)
		}
		b, err := io.ReadAll(zr)
		f.Close()
		if err != nil || len(b) == 0 {
			t.Fatalf("%s: %d bytes, %v", p, len(b), err)
		}
	}
	code, _, errs = cli(t, "eval", "--n", "5", "--episodes", "2", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.prof"))
	if code == 0 || !strings.Contains(errs, "--cpuprofile") {
		t.Fatalf("eval with an unwritable profile: exit %d, stderr %q", code, errs)
	}
}

// TestConfigureGC: the collector's target is gcPercent unless GOGC says
// otherwise.
func TestConfigureGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	configureGC(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != gcPercent {
		t.Errorf("GOGC unset: collector target %d, want %d", got, gcPercent)
	}
	configureGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC=100: collector target %d, want 100 (the environment's)", got)
	}
}
