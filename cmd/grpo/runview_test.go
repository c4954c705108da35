package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/orchestrator"
)

// TestRunViewPacePerRun: a view that shows two runs in turn (as grpo
// experiment's does) gives the second run's seconds per step and time left
// from its own steps: 2 steps of 10 s, then a run whose first step took 20 s.
func TestRunViewPacePerRun(t *testing.T) {
	var out bytes.Buffer
	v := newRunView(&out, false)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	play := func(start int, steps ...int) {
		v.event(orchestrator.Event{Time: at(start), RunStarted: &orchestrator.RunStarted{Steps: 4, From: 0}})
		for i, s := range steps {
			v.event(orchestrator.Event{Time: at(s), Step: i + 1, StepCommitted: &orchestrator.StepCommitted{}})
		}
	}
	play(0, 10, 20)
	play(100, 120)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"[1/4, 10s elapsed, 10.0 s/step, ETA 30s]",
		"[2/4, 20s elapsed, 10.0 s/step, ETA 20s]",
		"[1/4, 20s elapsed, 20.0 s/step, ETA 1m0s]",
	}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s", out.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d: %q, want it to end with %q", i, lines[i], w)
		}
	}
}
