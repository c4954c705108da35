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
	if code != 1 || stdout.Len() != 0 || stderr.String() != want {
		t.Fatalf("exit %d\nstdout %q\nstderr %q\nwant exit 1 and stderr %q", code, stdout.String(), stderr.String(), want)
	}
}
