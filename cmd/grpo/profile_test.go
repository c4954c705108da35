package main

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestEvalProfiles: `grpo eval --cpuprofile --memprofile` writes both
// profiles (gzipped protobuf, what go tool pprof reads), and a profile
// that cannot be written is refused before anything runs.
func TestEvalProfiles(t *testing.T) {
	// Every allocation sampled, so that the evaluation's are in the
	// profile for certain once it covers the whole run.
	// And no collection during the run: the profile must not depend on
	// one having happened after the last allocation.
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
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
	// The allocation profile covers the run to its end, not only to the
	// last collection before it (none, here): the episodes' requests are
	// in it with their counts. (Its stacks are there either way, counted
	// zero: pprof reads the counts.)
	if !testing.Short() {
		top, err := exec.Command("go", "tool", "pprof", "-sample_index=alloc_objects", "-top", "-nodefraction=0", "-focus=rollout.newRequest", mem).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof: %v\n%s", err, top)
		}
		if !strings.Contains(string(top), "rollout.newRequest") {
			t.Errorf("allocation profile without the episodes' requests:\n%s", top)
		}
	}
	code, _, errs = cli(t, "eval", "--n", "5", "--episodes", "2", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.prof"))
	if code == 0 || !strings.Contains(errs, "--cpuprofile") {
		t.Fatalf("eval with an unwritable profile: exit %d, stderr %q", code, errs)
	}
}
