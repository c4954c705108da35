package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
)

// TestRunsCancelOffline: grpo runs cancel marks a running run cancelled
// in the store, refuses a run a live process holds, and one that ended.
func TestRunsCancelOffline(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "grpo.db")
	store := checkpoint.New(db, checkpoint.Options{})
	for _, name := range []string{"stuck", "held"} {
		if err := store.CreateRun(ctx, checkpoint.Run{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := cli(t, "runs", "cancel", "stuck", "--db", db)
	if code != 0 || !strings.Contains(out, "run stuck cancelled") {
		t.Fatalf("runs cancel stuck = %d %q %q", code, out, errOut)
	}
	if r, _ := store.GetRun(ctx, "stuck"); r.State != checkpoint.StateCancelled || !strings.Contains(r.Error, "offline") {
		t.Fatalf("after runs cancel: state %s error %q, want cancelled", r.State, r.Error)
	}
	code, _, errOut = cli(t, "runs", "cancel", "--db", db, "stuck")
	if code == 0 || !strings.Contains(errOut, "not running: it is cancelled") {
		t.Fatalf("second runs cancel = %d %q, want an error", code, errOut)
	}
	// This process plays "held": the command refuses and changes nothing.
	lease, err := store.AcquireLease(ctx, "held", checkpoint.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	code, _, errOut = cli(t, "runs", "cancel", "held", "--db", db)
	if code == 0 || !strings.Contains(errOut, "being played by another process") || !strings.Contains(errOut, "/api/v1/runs/held/cancel") {
		t.Fatalf("runs cancel of a held run = %d %q, want refused", code, errOut)
	}
	if r, _ := store.GetRun(ctx, "held"); r.State != checkpoint.StateRunning {
		t.Fatalf("a refused cancel changed the state to %s", r.State)
	}
	if code, _, errOut = cli(t, "runs", "cancel", "nope", "--db", db); code == 0 || !strings.Contains(errOut, "no such run") {
		t.Fatalf("runs cancel nope = %d %q", code, errOut)
	}
	if code, _, errOut = cli(t, "runs", "cancel", "--db", db); code != 2 || !strings.Contains(errOut, "needs a run name") {
		t.Fatalf("runs cancel without a name = %d %q", code, errOut)
	}
}

// TestServeBadFlags: bad limits and peers files are refused before the
// daemon listens, naming the flag.
func TestServeBadFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "peers.yaml")
	if err := os.WriteFile(bad, []byte("inference: {a: {url: 'ftp://x'}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-rounds", "0"}, "--max-rounds 0: need at least 1"},
		{[]string{"--max-runs", "-1"}, "--max-runs -1: need at least 1"},
		{[]string{"--max-n", "1001"}, "--max-n 1001: at most 1000 (grpo's bound on any run)"},
		{[]string{"--peers", filepath.Join(dir, "none.yaml")}, "--peers: read peers file"},
		{[]string{"--peers", bad}, "inference peer a: url"},
	} {
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "g.db")}, tt.args...)
		code, _, errOut := cli(t, args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("grpo %v = %d %q, want 2 and %q", args, code, errOut, tt.want)
		}
	}
}

// TestServeBlankToken: a token with white space around it cannot be sent
// in a header, so the daemon refuses it rather than refuse every request.
func TestServeBlankToken(t *testing.T) {
	for _, tok := range []string{" ", "s3cret\n", " s3cret"} {
		var out, errb bytes.Buffer
		m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
			if k == "GRPO_TOKEN" {
				return tok
			}
			return ""
		}}
		code := m.Run(context.Background(), []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "g.db")})
		if code != 2 || !strings.Contains(errb.String(), "$GRPO_TOKEN begins or ends with white space") {
			t.Errorf("token %q: exit %d\n%s", tok, code, errb.String())
		}
	}
}
