package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
)

// TestResumeWhileDaemonPlays (issue 13): 'grpo run --resume' of a run
// that a 'grpo serve' daemon is playing, both real binaries on one
// store, is refused by the run's lease: exit 1, an error naming the
// holder (the daemon's pid) and how to cancel it there; the run stays
// 'running', is not marked failed, and the daemon keeps committing steps.
// The refusal is all it prints (no run header first).
func TestResumeWhileDaemonPlays(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "daemon.db")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	daemon := exec.Command(bin, "serve", "--addr", addr, "--db", db)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemon.Process.Kill(); daemon.Wait() })
	waitHealthy(t, "http://"+addr)
	type runState struct {
		State string            `json:"state"`
		Error string            `json:"error"`
		Steps []json.RawMessage `json:"steps"`
	}
	get := func() runState {
		var rs runState
		resp, err := http.Get("http://" + addr + "/api/v1/runs/p")
		if err != nil {
			return rs
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&rs)
		return rs
	}
	// Long enough that it is still playing when the test ends.
	resp, err := http.Post("http://"+addr+"/api/v1/runs", "application/yaml", strings.NewReader("run: {name: p, steps: 5000, seed: 2}\nvalidation: {episodes: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("launch: %s", resp.Status)
	}
	if !testutil.Eventually(func() bool { return len(get().Steps) >= 2 }) {
		t.Fatalf("the daemon's run made no progress within %s: %+v", testutil.Patience, get())
	}

	var stdout, stderr bytes.Buffer
	cli := exec.Command(bin, "run", "--resume", "p", "--db", db, "--quiet")
	cli.Stdout, cli.Stderr = &stdout, &stderr
	err = cli.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("grpo run --resume of the daemon's run: %v; want exit 1\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"being played by another process", fmt.Sprintf("pid %d", daemon.Process.Pid), "/api/v1/runs/p/cancel"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q does not mention %q", stderr.String(), want)
		}
	}
	// Refused before anything is printed: no run header, no table.
	if strings.Contains(stderr.String(), "run p: 5000 steps") || !strings.HasPrefix(stderr.String(), "grpo run: run p: ") || stdout.Len() != 0 {
		t.Errorf("the refusal is not the only output:\nstdout %q\nstderr %q", stdout.String(), stderr.String())
	}
	at := len(get().Steps)
	if !testutil.Eventually(func() bool { return len(get().Steps) >= at+2 }) {
		t.Fatalf("the daemon stopped committing steps after the refused resume (not 2 more within %s): %+v", testutil.Patience, get())
	}
	if rs := get(); rs.State != "running" || rs.Error != "" {
		t.Fatalf("after the refused resume: state %q error %q; want running, no error", rs.State, rs.Error)
	}
}
