package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/bench"
)

// BenchCommand is `grpo bench`.
type BenchCommand struct {
	*Main
	opts  bench.Options
	json  bool
	fake  string // "process" or "inprocess"
	serve string // serve-fake: "llm"
	prof  profiles
	svc   time.Duration
}

const benchSynopsis = `Usage: grpo bench [--rows cpu,rollout,floor,step,store,memory] [--agents 1000,2000,10000] [--service 200ms] [--quick] [--json]

Measures the orchestrator against fakes with known service times and prints
one table: (cpu) client CPU and allocations per LLM call, (rollout) rollout
time over the ideal (rounds x service time) at each --agents count (5 to
65535: each agent holds a connection to the one fake server from its own
local port), with the whole process's CPU per call (and the kernel's part
of it), peak RSS and TIME_WAIT connections, (floor) the same calls made by a bare
client of the same stack, net/http and encoding/json, with no episodes
(what this machine, Go's runtime and the stack cost any client; a row's
excess over it is grpo's own work). Both rows measure each count twice: cold (every
agent dials its connection, as a run's first step does) and warm (the
connections already open, as in a run's later steps when the server keeps
idle connections between steps). (step)
step time with a synchronous and an asynchronous pipeline against a trainer
of fixed duration, (store) committing a step and reading a long curve,
(memory) memory per in-flight episode. The fake inference server runs in a
child process (--fake process, the default), so the CPU figures are the
client's alone; the rollout and floor rows also give the fake's own CPU per
call (the two share this machine's cores, which bounds ideal/actual: the
cpu-bound ceiling line is the best ideal/actual their CPU per call allows).
--quick shrinks every size (for a smoke test).

  grpo bench serve-fake [--service 200ms] serves the fake on loopback alone.`

// ParseFlags parses the command line of `grpo bench`.
func (c *BenchCommand) ParseFlags(args []string) error {
	if len(args) > 0 && args[0] == "serve-fake" {
		fs := c.newFlags("bench serve-fake", "Usage: grpo bench serve-fake [--service 200ms]\n\nServes the bench's fake OpenAI-compatible server on a loopback port and prints its address.")
		fs.DurationVar(&c.svc, "service", 200*time.Millisecond, "service time of every chat completion")
		c.serve = "llm"
		return parse(fs, args[1:])
	}
	fs := c.newFlags("bench", benchSynopsis)
	rows := fs.String("rows", strings.Join(bench.Rows, ","), "rows to measure, from "+strings.Join(bench.Rows, ","))
	agents := fs.String("agents", "1000,2000,10000", fmt.Sprintf("concurrent agents of the rollout and floor rows, each count %d to %d (each agent holds a connection to the one fake server, from its own local port)", bench.AgentsBound.Min, bench.AgentsBound.Max))
	fs.DurationVar(&c.opts.Service, "service", 200*time.Millisecond, "the fake server's service time per call")
	fs.DurationVar(&c.opts.TrainTime, "train", 2*time.Second, "the fake trainer's job duration (step row)")
	fs.IntVar(&c.opts.Steps, "steps", 4, "training steps per run of the step row")
	fs.IntVar(&c.opts.Curve, "curve", 10000, "steps in the curve the store row reads")
	fs.BoolVar(&c.opts.Quick, "quick", false, "small sizes everywhere: checks the table, not the speed")
	fs.BoolVar(&c.json, "json", false, "print JSON lines instead of a table")
	c.prof.flags(fs, "the bench process")
	fs.StringVar(&c.fake, "fake", "process", "where the fake inference server runs: process (a child process) or inprocess")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	for _, r := range strings.Split(*rows, ",") {
		r = strings.TrimSpace(r)
		if !slices.Contains(bench.Rows, r) {
			return usagef("--rows: unknown row %q (want some of %s)", r, strings.Join(bench.Rows, ","))
		}
		c.opts.Rows = append(c.opts.Rows, r)
	}
	n, err := parseInts("agents", *agents)
	if err != nil {
		return err
	}
	for _, a := range n {
		if err := within("agents", a, bench.AgentsBound); err != nil {
			return err
		}
	}
	c.opts.Agents = n
	if c.opts.Service <= 0 {
		return usagef("--service %s: must be positive", c.opts.Service)
	}
	if c.opts.TrainTime <= 0 {
		return usagef("--train %s: must be positive", c.opts.TrainTime)
	}
	if c.opts.Steps < 1 || c.opts.Curve < 1 {
		return usagef("--steps and --curve must be at least 1")
	}
	if c.fake != "process" && c.fake != "inprocess" {
		return usagef("--fake %q: want process or inprocess", c.fake)
	}
	return nil
}

// Run measures and prints the table.
func (c *BenchCommand) Run(ctx context.Context) (err error) {
	if c.serve != "" {
		return bench.ServeLLM(ctx, c.svc, func(addr string) {
			fmt.Fprintf(c.Stdout, "listening http://%s/v1\n", addr)
		})
	}
	c.opts.Defaults()
	if c.fake == "process" {
		url, stop, err := startFake(ctx, c.opts.Service)
		if err != nil {
			return err
		}
		defer stop()
		c.opts.LLMURL = url
	}
	stop, err := c.prof.start()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stop(); err == nil {
			err = perr
		}
	}()
	c.opts.Progress = func(row string) { fmt.Fprintf(c.Stderr, "bench: %s...\n", row) }
	results, err := bench.Run(ctx, c.opts)
	if c.json {
		enc := json.NewEncoder(c.Stdout)
		for _, r := range results {
			enc.Encode(r)
		}
	} else {
		bench.Print(c.Stdout, results)
	}
	return err
}

// startFake runs `grpo bench serve-fake` as a child process, so the
// bench's CPU figures are the client's alone, and returns its base URL.
func startFake(ctx context.Context, service time.Duration) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("start fake server: %w", err)
	}
	cmd := exec.Command(exe, "bench", "serve-fake", "--service", service.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, fmt.Errorf("start fake server: %w", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start fake server %s: %w", exe, err)
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
	}()
	select {
	case l, ok := <-line:
		url, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			stop()
			return "", nil, fmt.Errorf("start fake server %s: it printed %q, want \"listening URL\"", exe, l)
		}
		return url, stop, nil
	case <-time.After(10 * time.Second):
		stop()
		return "", nil, fmt.Errorf("start fake server %s: no address after 10s", exe)
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	}
}
