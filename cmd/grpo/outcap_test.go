package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// wholeRecords reads a .jsonl file and checks every line is a whole
// episode record, newline-terminated.
func wholeRecords(t *testing.T, path string) (int, int64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		return 0, 0
	}
	if data[len(data)-1] != '\n' {
		t.Fatalf("%s ends in a partial line: %q", path, data[max(0, len(data)-40):])
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range lines {
		var ep rollout.Episode
		if err := json.Unmarshal([]byte(l), &ep); err != nil || ep.Spec.ID == "" {
			t.Fatalf("%s line %d is not a whole record (%v): %.80q", path, i+1, err, l)
		}
	}
	return len(lines), int64(len(data))
}

// TestEvalOutCaps: --out writes whole records only, within
// --max-out-bytes and --max-record-bytes; passing either fails the
// evaluation (exit 1) with a message naming the file, the flag and the
// sizes, and what was written stays whole lines. Without the flags the
// same evaluation writes every record.
func TestEvalOutCaps(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	dir := t.TempDir()
	base := []string{"eval", "--base-url", srv.BaseURL(), "--model", "m", "--episodes", "6", "--concurrency", "1"}

	full := filepath.Join(dir, "full.jsonl")
	if code, _, errs := cli(t, append(base, "--out", full)...); code != 0 {
		t.Fatalf("uncapped: exit %d: %s", code, errs)
	}
	n, size := wholeRecords(t, full)
	if n != 6 {
		t.Fatalf("uncapped: %d records, want 6", n)
	}
	per := size / 6 // the records differ only in ids and seeds: about this size each

	// Room for about two and a half records: two are written, the third refused.
	capped := filepath.Join(dir, "capped.jsonl")
	limit := per * 5 / 2
	code, _, errs := cli(t, append(base, "--out", capped, "--max-out-bytes", i64toa(limit))...)
	if code != 1 || !strings.Contains(errs, "--out "+capped) || !strings.Contains(errs, "over --max-out-bytes "+i64toa(limit)) {
		t.Fatalf("total cap: exit %d, stderr %q", code, errs)
	}
	n, size = wholeRecords(t, capped)
	if n != 2 || size > limit {
		t.Fatalf("total cap %d: %d records, %d bytes; want 2 records within the cap", limit, n, size)
	}

	small := filepath.Join(dir, "small.jsonl")
	code, _, errs = cli(t, append(base, "--out", small, "--max-record-bytes", "1000")...)
	if code != 1 || !strings.Contains(errs, "record is ") || !strings.Contains(errs, "over --max-record-bytes 1000") {
		t.Fatalf("record cap: exit %d, stderr %q", code, errs)
	}
	if n, _ := wholeRecords(t, small); n != 0 {
		t.Fatalf("record cap: %d records written, want 0", n)
	}
}

func i64toa(v int64) string { return strconv.FormatInt(v, 10) }

// failingFile writes half of what it is given, then fails, as a full
// disk does.
type failingFile struct {
	data      []byte
	truncated int64
}

func (f *failingFile) Write(b []byte) (int, error) {
	if len(f.data) > 0 {
		f.data = append(f.data, b[:len(b)/2]...)
		return len(b) / 2, errors.New("no space left on device")
	}
	f.data = append(f.data, b...)
	return len(b), nil
}
func (f *failingFile) Truncate(n int64) error { f.data, f.truncated = f.data[:n], n; return nil }
func (f *failingFile) Close() error           { return nil }
func (f *failingFile) Name() string           { return "fake.jsonl" }

// TestJSONLSinkCutsPartialLine: a write that fails midway is cut back
// to the last whole record, and the error sticks for Close.
func TestJSONLSinkCutsPartialLine(t *testing.T) {
	f := &failingFile{}
	s := newJSONLSink(f, defaultMaxRecordBytes, defaultMaxOutBytes)
	ep := rollout.Episode{Spec: rollout.EpisodeSpec{ID: "m/n5/e0", Model: "m"}}
	if err := s.Write(ep); err != nil {
		t.Fatal(err)
	}
	first := len(f.data)
	ep.Spec.ID = "m/n5/e1"
	err := s.Write(ep)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "m/n5/e1") {
		t.Fatalf("second write: %v", err)
	}
	if len(f.data) != first || f.truncated != int64(first) || f.data[first-1] != '\n' {
		t.Fatalf("after the failed write: %d bytes (truncated to %d), want the first record's %d", len(f.data), f.truncated, first)
	}
	if cerr := s.Close(); cerr == nil || cerr.Error() != err.Error() {
		t.Fatalf("Close: %v, want %v", cerr, err)
	}
}

// TestEvalRunOutCap: 'grpo eval --run' (a stored run's checkpoints)
// caps its --out file the same way.
func TestEvalRunOutCap(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: r, steps: 1}\nvalidation: {episodes: 2}\ntest: {episodes: 3}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db, "--quiet"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	out := filepath.Join(dir, "t.jsonl")
	code, _, errs := cli(t, "eval", "--db", db, "--run", "r", "--step", "last", "--out", out, "--max-record-bytes", "1000")
	if code != 1 || !strings.Contains(errs, "--out "+out) || !strings.Contains(errs, "over --max-record-bytes 1000") {
		t.Fatalf("eval --run with a record cap: exit %d, stderr %q", code, errs)
	}
	if n, _ := wholeRecords(t, out); n != 0 {
		t.Fatalf("%d records written, want 0", n)
	}
}
