package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/bench"
)

// TestBenchQuickTable runs every row of `grpo bench --quick` against
// in-process fakes and checks the table's shape (not its figures): the
// header, each row present with the metrics it promises, and the JSON
// form.
func TestBenchQuickTable(t *testing.T) {
	var out, errOut bytes.Buffer
	m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
	if code := m.Run(context.Background(), []string{"bench", "--quick", "--fake", "inprocess"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ROW CASE METRIC VALUE UNIT" {
		t.Fatalf("header %q", lines[0])
	}
	text := out.String()
	for _, want := range []string{"cpu per call", "kernel cpu per call", "rounds), warm", "calls each), warm", "allocs per call", "ideal/actual", "peak rss", "time_wait after",
		"sync step (k=0)", "async step (k=1)", "async/sync", "validated every step", "commit a step and select the best (mean)", "select in memory after a commit", "read the curve", "heap+stacks per episode"} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	rows := map[string]bool{}
	for _, l := range lines[1:] {
		rows[strings.Fields(l)[0]] = true
	}
	for _, r := range bench.Rows {
		if !rows[r] {
			t.Errorf("no %s row:\n%s", r, text)
		}
	}

	out.Reset()
	if code := m.Run(context.Background(), []string{"bench", "--quick", "--fake", "inprocess", "--rows", "store", "--json"}); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	n := 0
	for l := range strings.Lines(out.String()) {
		var r bench.Result
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Row != "store" || r.Metric == "" {
			t.Fatalf("JSON line %q: %v", l, err)
		}
		n++
	}
	if n != 7 { // commit and select mean; commit first, last; select first, last; read the run, read the curve
		t.Fatalf("%d store results, want 7", n)
	}
}

func TestBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rows", "cpu,disk"}, `--rows: unknown row "disk" (want some of cpu,rollout,floor,step,store,memory)`},
		{[]string{"--agents", "3"}, "--agents 3: need at least 5 (one table of 5)"},
		{[]string{"--agents", "x"}, `--agents "x": "x" is not a whole number`},
		{[]string{"--service", "0s"}, "--service 0s: must be positive"},
		{[]string{"--fake", "remote"}, `--fake "remote": want process or inprocess`},
	} {
		var out, errOut bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &errOut, Getenv: func(string) string { return "" }}
		if code := m.Run(context.Background(), append([]string{"bench"}, tc.args...)); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("bench %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestBenchAgentsRange: --agents takes each count from 5 to 65535
// (bench.AgentsBound), the ends included, and refuses a count above,
// naming it and the maximum. (Parsed only: a count let through would be
// measured.)
func TestBenchAgentsRange(t *testing.T) {
	parse := func(agents string) (*BenchCommand, error) {
		c := &BenchCommand{Main: &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }}}
		return c, c.ParseFlags([]string{"--agents", agents})
	}
	c, err := parse("5,65535")
	if err != nil {
		t.Fatalf("--agents 5,65535: %v", err)
	}
	if !slices.Equal(c.opts.Agents, []int{5, 65535}) {
		t.Errorf("--agents 5,65535 gave %v", c.opts.Agents)
	}
	for agents, want := range map[string]string{
		"65536":        "--agents 65536: at most 65535 agents (each holds a connection to the one fake server from its own local port, and a client has at most 65535 ports per server address",
		"1000,1000000": "--agents 1000000: at most 65535 agents",
	} {
		if _, err := parse(agents); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--agents %s: %v; want %q", agents, err, want)
		}
	}
}

// TestBenchFakeInChildProcess runs the real binary, whose rollout row
// talks to `grpo bench serve-fake` in a child process, and checks the
// child is gone afterwards.
func TestBenchFakeInChildProcess(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "bench", "--quick", "--rows", "rollout,floor,memory").CombinedOutput()
	if err != nil {
		t.Fatalf("grpo bench: %v\n%s", err, out)
	}
	for _, want := range []string{"rollout", "ideal/actual", "time_wait after", "heap+stacks per episode"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`floor +10 agents \(5 calls each\) +cpu per call +[0-9.]+ +us`).Match(out) {
		t.Errorf("output lacks the floor's CPU per call:\n%s", out)
	}
	if !regexp.MustCompile(`rollout +10 agents \(2 x n=5 x 5 rounds\) +server cpu per call +[1-9][0-9.]* +us`).Match(out) {
		t.Errorf("output lacks the fake server's CPU per call:\n%s", out)
	}
	if ps, _ := exec.Command("pgrep", "-f", bin+" bench serve-fake").Output(); len(ps) > 0 {
		t.Errorf("the fake server outlived the bench: pids %s", ps)
	}
}
