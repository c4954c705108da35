package server_test

import (
	"context"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestRestartRecordsFinishedRun: a daemon killed between a run's last
// commit and recording its end leaves it running with every step
// committed; the next daemon records it succeeded without playing it.
func TestRestartRecordsFinishedRun(t *testing.T) {
	e := newEnv(t)
	s1 := e.MustStart(t, server.Options{})
	launch(t, s1.URL(), "", smallRun("done", 1))
	waitRun(t, s1.URL(), "done", "finish", finished)
	s1.Close()
	ctx := context.Background()
	if err := e.store.SetRunState(ctx, "done", checkpoint.StateRunning, ""); err != nil {
		t.Fatal(err)
	}
	s2 := e.MustStart(t, server.Options{})
	r := waitRun(t, s2.URL(), "done", "succeeded", finished)
	if got, want := r.State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s (%s), want %s", got, r.Error, want)
	}
	if got, want := len(r.Steps), 2; got != want {
		t.Fatalf("len(steps)=%d, want %d", got, want)
	}
}
