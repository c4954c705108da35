package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/refmodel"
)

// hangingTrainer is a job API whose jobs never finish: it accepts every
// create and answers every poll "running", counting the polls.
func hangingTrainer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var polls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/healthz":
			w.Write([]byte(`{"ok":true}`))
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
			var req struct{ ID string }
			json.NewDecoder(r.Body).Decode(&req)
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/jobs/"):
			polls.Add(1)
			fmt.Fprintf(w, `{"id":%q,"state":"running","progress":0.5}`, strings.TrimPrefix(r.URL.Path, "/v1/jobs/"))
		default:
			w.Write([]byte(`{}`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &polls
}

// TestDaemonCrashLoopStops (issue 13, the real binary): a run whose
// daemon is SIGKILLed while it plays the run — here while it waits for a
// trainer job, as an out-of-memory kill would find it — is resumed by
// the next start, but not forever: after 3 starts in a row that died
// before the run committed a step, the 4th start marks it failed with an
// error naming the count and how to resume it by hand, and does not play
// it. 'grpo run --resume' then still plays it.
func TestDaemonCrashLoopStops(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "daemon.db")
	b := refBackend(t, 1)
	inf := httptest.NewServer(b.InferenceHandler())
	t.Cleanup(inf.Close)
	trainer, polls := hangingTrainer(t)

	start := func() (*exec.Cmd, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		d := exec.Command(bin, "serve", "--addr", addr, "--db", db)
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Process.Kill(); d.Wait() })
		waitHealthy(t, "http://"+addr)
		return d, "http://" + addr
	}
	// waitPolled waits until the run polls its job again: it is playing.
	waitPolled := func(what string) {
		t.Helper()
		before := polls.Load()
		if !testutil.Eventually(func() bool { return polls.Load() > before }) {
			t.Fatalf("%s: the run did not poll its job within %s", what, testutil.Patience)
		}
	}
	// kill SIGKILLs a process playing the run, and checks the count of
	// starts the store then holds.
	kill := func(d *exec.Cmd, starts int) {
		t.Helper()
		d.Process.Signal(syscall.SIGKILL)
		d.Wait()
		if n, err := checkpoint.New(db, checkpoint.Options{}).Starts(context.Background(), "loop"); err != nil || n != starts {
			t.Fatalf("failed starts %d, %v; want %d", n, err, starts)
		}
	}

	d, base := start()
	resp, err := http.Post(base+"/api/v1/runs", "application/yaml", strings.NewReader(fmt.Sprintf(
		"run: {name: loop, steps: 3, seed: 2}\nvalidation: {episodes: 2}\ninference: {model: %s, endpoints: [{url: '%s/v1'}]}\ntrainer: {kind: jobs, url: '%s', base_model: %s}\n",
		refmodel.BaseModelName, inf.URL, trainer.URL, refmodel.BaseModelName)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("launch: %s", resp.Status)
	}
	waitPolled("launch")
	kill(d, 0) // a launch is not a resumed start
	for i := 1; i <= 3; i++ {
		d, _ := start()
		waitPolled(fmt.Sprintf("start %d", i))
		kill(d, i)
	}

	d, base = start()
	// The daemon answers before it has resumed (or refused) its runs.
	var rs struct{ State, Error string }
	refused := testutil.Eventually(func() bool {
		resp, err := http.Get(base + "/api/v1/runs/loop")
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(resp.Body).Decode(&rs)
		resp.Body.Close()
		return rs.State == "failed"
	})
	if !refused {
		t.Fatalf("after 3 failed starts: the run did not fail within %s: state %q error %q", testutil.Patience, rs.State, rs.Error)
	}
	if rs.State != "failed" || !strings.Contains(rs.Error, "resumed this run 3 times in a row") || !strings.Contains(rs.Error, "grpo run --resume loop --db "+db) || !strings.Contains(rs.Error, "POST /api/v1/runs/loop/resume") {
		t.Fatalf("after 3 failed starts: state %q error %q; want failed, naming the count and how to resume", rs.State, rs.Error)
	}
	before := polls.Load()
	time.Sleep(time.Second)
	if n := polls.Load(); n != before {
		t.Fatalf("the 4th start played the run (%d polls)", n-before)
	}
	kill(d, 4)

	// By hand it plays again, the count forgiven.
	cli := exec.Command(bin, "run", "--resume", "loop", "--db", db, "--quiet")
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Process.Kill(); cli.Wait() })
	waitPolled("grpo run --resume")
	kill(cli, 0)
}
