package main

import (
	"context"
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
