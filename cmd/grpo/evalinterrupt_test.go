package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
)

// TestEvalInterruptedSaysWhatWasKept: an evaluation stopped by Ctrl-C
// says it was interrupted, after how many of its episodes, and how many
// whole records its --out file keeps, rather than "context canceled".
func TestEvalInterruptedSaysWhatWasKept(t *testing.T) {
	out := filepath.Join(t.TempDir(), "e.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Ctrl-C once the first record is on disk.
		for ctx.Err() == nil {
			if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := m.Run(ctx, []string{"eval", "--n", "5", "--episodes", "20000", "--out", out})
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	records := bytes.Count(data, []byte("\n"))
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatalf("--out does not end with a whole record: %d bytes", len(data))
	}
	want := fmt.Sprintf("grpo eval: interrupted after %d of 20000 episodes; %s keeps %d whole records\n", records, out, records)
	if code != 1 || stdout.Len() != 0 || withoutLogs(stderr.String()) != want {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 1 and stderr %q", code, stdout.String(), stderr.String(), want)
	}
}

// TestEvalRunInterruptedKeepsFinishedCheckpoints: 'grpo eval --run'
// stopped by Ctrl-C while it measures its second checkpoint has stored
// the first one's test measurement, says so, and the same command then
// measures the rest.
func TestEvalRunInterruptedKeepsFinishedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: small, steps: 1}\nvalidation: {episodes: 4}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	const episodes = 400 // per checkpoint
	out := filepath.Join(dir, "e.jsonl")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Ctrl-C once the second checkpoint's first episode is on disk.
		for ctx.Err() == nil {
			if data, err := os.ReadFile(out); err == nil && bytes.Count(data, []byte("\n")) > episodes {
				cancel()
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	var stdout, stderr bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	args := []string{"eval", "--db", db, "--run", "small", "--step", "base,1", "--n", "5", "--episodes", fmt.Sprint(episodes)}
	code := m.Run(ctx, append(args, "--out", out))
	want := "grpo eval: interrupted: the test measurements of step 0 are stored in " + db
	if code != 1 || !strings.HasPrefix(withoutLogs(stderr.String()), want) {
		t.Fatalf("exit %d, stderr %q; want exit 1 and %q", code, stderr.String(), want)
	}
	tests, err := checkpoint.New(db, checkpoint.Options{}).TestEvaluations(context.Background(), "small", checkpoint.SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) != 1 || tests[0].Evaluation.Step != 0 || tests[0].Evaluation.Episodes != episodes {
		t.Fatalf("stored test measurements %+v, want step 0's alone, of %d episodes", tests, episodes)
	}
	if code, _, errs := cli(t, args...); code != 0 {
		t.Fatalf("eval again: exit %d\n%s", code, errs)
	}
	tests, err = checkpoint.New(db, checkpoint.Options{}).TestEvaluations(context.Background(), "small", checkpoint.SplitTest)
	if err != nil || len(tests) != 2 {
		t.Fatalf("after the second eval: %d measurements, %v; want steps 0 and 1", len(tests), err)
	}
}

// withoutLogs is stderr without its log records (slog's text lines,
// "time=... level=WARN ..."): a loaded machine may log a slow TCP connect
// to the embedded backend before the message a test reads.
func withoutLogs(stderr string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if !strings.HasPrefix(line, "time=") {
			b.WriteString(line)
		}
	}
	return b.String()
}
