package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/run"
	"github.com/grpo-dev/grpo/server"
)

// TestDaemonResumesInTheRunsDataDir: a run grpo run started (its embedded
// trainer under <db>.data) and left running with a step's job trained is
// resumed by the daemon in that directory: the job is reattached there,
// not trained again under the daemon's <data-dir>/<run>. Stopped at step
// 1, no adapter of the run is stored yet: the directory is the one
// recorded with the run.
func TestDaemonResumesInTheRunsDataDir(t *testing.T) {
	for _, stop := range []int{1, 2} {
		t.Run(fmt.Sprintf("stopped at step %d", stop), func(t *testing.T) { testDaemonResumesInTheRunsDataDir(t, stop) })
	}
}

func testDaemonResumesInTheRunsDataDir(t *testing.T, stop int) {
	e := newEnv(t)
	cli := e.store.Path() + ".data"
	cfg, err := config.Parse([]byte(smallRun("cli", 3)), config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	r, err := run.Open(ctx, cfg, run.Options{Store: e.store, DataDir: cli, Interrupted: checkpoint.StateRunning,
		Events: func(ev orchestrator.Event) {
			if j := ev.JobState; j != nil && ev.Step == stop && j.State == "succeeded" {
				once.Do(cancel) // as a SIGKILL would: the step trained, not committed
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Play(ctx); err == nil {
		t.Fatal("the interrupted run finished")
	}
	r.Close()
	if inf, err := e.store.GetInFlight(context.Background(), "cli"); err != nil || inf.For(stop) == nil {
		t.Fatalf("in-flight record %+v, %v: want step %d's job", inf, err, stop)
	}

	s := e.MustStart(t, server.Options{})
	got := waitRun(t, s.URL(), "cli", "finish", finished)
	if got.State != checkpoint.StateSucceeded {
		t.Fatalf("state %s (%s), want succeeded", got.State, got.Error)
	}
	_, steps, _, err := e.store.Snapshot(context.Background(), "cli")
	if err != nil || len(steps) != 4 {
		t.Fatalf("%d steps, %v; want 4", len(steps), err)
	}
	for _, st := range steps[1:] {
		if st.Adapter == nil || !strings.HasPrefix(st.Adapter.Path, cli+string(filepath.Separator)) {
			t.Fatalf("step %d's adapter %+v, want it under the run's own %s", st.Step, st.Adapter, cli)
		}
	}
	jobs, err := os.ReadDir(filepath.Join(cli, "jobs"))
	if err != nil || len(jobs) != 3 {
		t.Fatalf("%d jobs under %s (%v), want one per step", len(jobs), cli, err)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "data", "cli")); !os.IsNotExist(err) {
		t.Fatalf("the daemon made a data directory of its own for the run (%v): its trainer trained step %d again", err, stop)
	}
}
