package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/server"
	"github.com/prometheus/client_golang/prometheus"
)

// startDaemon starts a daemon on addr over the store db.
func startDaemon(t *testing.T, addr, db string) *server.Server {
	t.Helper()
	s := server.New(server.Options{
		Store: checkpoint.New(db, checkpoint.Options{}), DataDir: db + ".data",
		Registry: prometheus.NewRegistry(), Addr: addr,
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("start daemon: %v", err)
	}
	return s
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func launch(t *testing.T, base, body string) {
	t.Helper()
	resp, err := http.Post(base+"/api/v1/runs", "application/yaml", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("launch: %s", resp.Status)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testutil.Eventually(cond) {
		t.Fatalf("timed out waiting %s for %s", testutil.Patience, what)
	}
}

// TestWatchUnknownAndFinishedRuns: watch NOPE says so and exits 1;
// watch on a finished run prints its end and exits 0, with no wait.
func TestWatchUnknownAndFinishedRuns(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	s := startDaemon(t, addr, filepath.Join(dir, "d.db"))
	defer s.Close()
	code, out, errs := cli(t, "watch", "NOPE", "--addr", addr)
	if code != 1 || out != "" || !strings.Contains(errs, `no such run "NOPE"`) {
		t.Fatalf("watch NOPE: exit %d\n%s\n%s", code, out, errs)
	}
	launch(t, s.URL(), "run: {name: fin, steps: 1}\nvalidation: {episodes: 2}\n")
	// Live: watch returns at the run's end.
	code, out, errs = cli(t, "watch", "--addr", s.URL(), "fin")
	if code != 0 || !strings.Contains(out, "fin") {
		t.Fatalf("watch fin: exit %d\n%s\n%s", code, out, errs)
	}
	waitFor(t, "fin to finish", func() bool {
		_, out, _ := cli(t, "runs", "--db", filepath.Join(dir, "d.db"))
		return strings.Contains(out, "succeeded")
	})
	code, out, errs = cli(t, "watch", "fin", "--addr", addr)
	if code != 0 || !strings.HasPrefix(out, "run fin succeeded after step 1; best step ") {
		t.Fatalf("watch on a finished run: exit %d\n%s\n%s", code, out, errs)
	}
	// With --json, stdout carries events only: the end is said on stderr.
	code, out, errs = cli(t, "watch", "fin", "--addr", addr, "--json")
	if code != 0 || out != "" || !strings.HasPrefix(errs, "run fin succeeded after step 1; best step ") {
		t.Fatalf("watch --json on a finished run: exit %d\nstdout %q\nstderr %q", code, out, errs)
	}
}

// TestWatchReconnectsAfterRestart: the daemon stops and starts again on
// the same address; watch carries on and prints the new run's steps.
func TestWatchReconnectsAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	addr := freeAddr(t)
	s1 := startDaemon(t, addr, db)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errs testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- m.Run(ctx, []string{"watch", "--addr", addr}) }()
	// Let watch connect: a run's lines show it.
	launch(t, s1.URL(), "run: {name: one, steps: 1}\nvalidation: {episodes: 2}\n")
	waitFor(t, "watch to print run one", func() bool { return strings.Contains(out.String(), "one ") })
	s1.Close()
	waitFor(t, "watch to notice", func() bool { return strings.Contains(errs.String(), "reconnecting") })
	s2 := startDaemon(t, addr, db)
	defer s2.Close()
	waitFor(t, "watch to reconnect", func() bool { return strings.Contains(errs.String(), "reconnected to http://"+addr) })
	launch(t, s2.URL(), "run: {name: two, steps: 1}\nvalidation: {episodes: 2}\n")
	waitFor(t, "watch to print run two's step", func() bool { return strings.Contains(out.String(), "two          step  1 n=5") })
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("watch exit %d: %s", code, errs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not stop on cancel")
	}
}

// TestWatchRunNameWithSlashes: watch follows and reads back a run named as
// grpo experiment names them (<experiment>/<arm>/<seed>).
func TestWatchRunNameWithSlashes(t *testing.T) {
	dir := t.TempDir()
	s := startDaemon(t, freeAddr(t), filepath.Join(dir, "d.db"))
	defer s.Close()
	launch(t, s.URL(), "run: {name: exp/arm/1, steps: 1}\nvalidation: {episodes: 2}\n")
	code, out, errs := cli(t, "watch", "--addr", s.URL(), "exp/arm/1")
	if code != 0 || !strings.Contains(out, " exp/arm/1 ") || !strings.Contains(out, "run_finished") || !strings.Contains(out, "succeeded") {
		t.Fatalf("watch exp/arm/1: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = cli(t, "watch", "--addr", s.URL(), "exp/arm/1")
	if code != 0 || !strings.HasPrefix(out, "run exp/arm/1 succeeded after step 1; best step ") {
		t.Fatalf("watch on the finished exp/arm/1: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestWatchExitStatus: watch RUN exits 1 when the run is cancelled (as
// when it fails; 0 when it succeeds: TestWatchUnknownAndFinishedRuns),
// both following it and asked about it afterwards; a run that ended
// before committing a step says so.
func TestWatchExitStatus(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	s := startDaemon(t, addr, filepath.Join(dir, "d.db"))
	defer s.Close()

	launch(t, s.URL(), "run: {name: long, steps: 1000}\nvalidation: {episodes: 2}\n")
	var out, errs testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() { done <- m.Run(context.Background(), []string{"watch", "long", "--addr", addr}) }()
	waitFor(t, "watch to print a step", func() bool { return strings.Contains(out.String(), "long         step  1") })
	resp, err := http.Post(s.URL()+"/api/v1/runs/long/cancel", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errs.String(), "grpo watch: run long cancelled") {
			t.Fatalf("watch of a cancelled run: exit %d\n%s\n%s", code, out.String(), errs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("watch did not end with the cancelled run")
	}
	code, stdout, stderr := cli(t, "watch", "long", "--addr", addr)
	if code != 1 || !strings.HasPrefix(stdout, "run long cancelled after step ") {
		t.Fatalf("watch of the cancelled run afterwards: exit %d\n%s\n%s", code, stdout, stderr)
	}

	// A run that ended before committing a step says so.
	if got, want := endLine(checkpoint.RunView{Run: "broken", State: checkpoint.StateFailed, Error: "no endpoint"}), "run broken failed before any step: no endpoint"; got != want {
		t.Fatalf("endLine of a run with no step = %q, want %q", got, want)
	}
	for state, want := range map[string]string{checkpoint.StateFailed: "run r failed", checkpoint.StateCancelled: "run r cancelled", checkpoint.StateSucceeded: ""} {
		err := (&watchCommand{run: "r", endState: state}).ended()
		if got := fmt.Sprint(err); want == "" && err != nil || want != "" && got != want {
			t.Errorf("watch's result for a run %s: %v, want %q", state, err, want)
		}
	}
}

// TestWatchCatchesUpAfterRestart: steps the run commits while watch waits
// to reconnect are printed once it has, each step exactly once.
func TestWatchCatchesUpAfterRestart(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	addr := freeAddr(t)
	s1 := startDaemon(t, addr, db)
	launch(t, s1.URL(), "run: {name: long, steps: 20}\nvalidation: {episodes: 2}\n")
	base, err := daemonURL(addr)
	if err != nil {
		t.Fatal(err)
	}
	// Watch reconnects only once the restarted daemon has committed a
	// step. (It reconnected after 3 s, which a loaded machine could spend
	// before the restarted daemon committed one: nothing was caught up.)
	resume := make(chan struct{})
	c := &watchCommand{base: base, run: "long", retry: time.Millisecond, pause: func(ctx context.Context, _ time.Duration) error {
		select {
		case <-resume:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	var out, errs testutil.Buffer
	done := make(chan error, 1)
	go func() { done <- c.watch(context.Background(), &out, &errs) }()
	waitFor(t, "watch to print step 2", func() bool { return strings.Contains(out.String(), "long         step  2") })
	s1.Close()
	waitFor(t, "watch to notice", func() bool { return strings.Contains(errs.String(), "reconnecting") })
	store := checkpoint.New(db, checkpoint.Options{})
	steps := func() int {
		_, st, _, err := store.Snapshot(context.Background(), "long")
		if err != nil {
			t.Fatal(err)
		}
		return len(st)
	}
	stopped := steps()
	s2 := startDaemon(t, addr, db)
	defer s2.Close()
	waitFor(t, "the restarted daemon to commit a step", func() bool { return steps() > stopped })
	close(resume)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("watch: %v\n%s", err, errs.String())
		}
	case <-time.After(5 * time.Minute): // 20 steps took 70 s under -race on a loaded CI machine
		t.Fatalf("watch did not end with the run:\n%s\n%s", out.String(), errs.String())
	}
	text := out.String()
	if !strings.Contains(text, "(while reconnecting)") {
		t.Fatalf("no step printed as caught up after the restart:\n%s\n%s", text, errs.String())
	}
	first := -1
	for step := 1; step <= 20; step++ {
		n := strings.Count(text, fmt.Sprintf("long         step %2d n=", step))
		if n > 1 || n == 0 && first >= 0 {
			t.Fatalf("step %d printed %d times:\n%s", step, n, text)
		}
		if n == 1 && first < 0 {
			first = step
		}
	}
}
