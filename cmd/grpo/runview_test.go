package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
)

// TestRunViewKeepsTheNextStepsBar: with an asynchronous pipeline step 1
// commits (after its validation) once step 2 has started; step 2's
// progress bar stays until step 2 commits.
func TestRunViewKeepsTheNextStepsBar(t *testing.T) {
	var out bytes.Buffer
	v := &runView{w: &out, tty: true}
	v.event(orchestrator.Event{Type: orchestrator.EventStepStarted, Step: 2, StepStarted: &orchestrator.StepStarted{N: 5, Validation: 8}})
	v.event(orchestrator.Event{Type: orchestrator.EventStepCommitted, Step: 1, StepCommitted: &orchestrator.StepCommitted{}})
	if v.bar == nil || v.step != 2 {
		t.Fatalf("step 1's commit ended step 2's bar (bar %v, step %d)", v.bar, v.step)
	}
	v.event(orchestrator.Event{Type: orchestrator.EventStepCommitted, Step: 2, StepCommitted: &orchestrator.StepCommitted{}})
	if v.bar != nil {
		t.Fatal("step 2's commit left its bar")
	}
	if got := out.String(); !strings.Contains(got, "step  1 committed") || !strings.Contains(got, "step  2 committed") {
		t.Fatalf("output %q lacks the commit lines", got)
	}
}

// TestRunViewSaysWhereAResumeStarts: a resumed run says from which step
// it goes on, and a step whose job was submitted before the restart says
// it waits for that job.
func TestRunViewSaysWhereAResumeStarts(t *testing.T) {
	var out bytes.Buffer
	v := &runView{w: &out}
	at := time.Date(2026, 5, 1, 9, 30, 0, 0, time.Local)
	v.event(orchestrator.Event{Type: orchestrator.EventRunStarted, Step: 3, Time: at, RunStarted: &orchestrator.RunStarted{Steps: 8, Resumed: true, From: 3}})
	v.event(orchestrator.Event{Type: orchestrator.EventStepStarted, Step: 3, Time: at.Add(time.Second), StepStarted: &orchestrator.StepStarted{N: 5, Reattach: true}})
	// Not a terminal: each line starts with its event's time.
	want := "2026-05-01 09:30:00 resuming at step 3 of 8 (the steps before it are stored)\n2026-05-01 09:30:01 step  3: its trainer job was submitted before the restart; waiting for it\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	out.Reset()
	v.event(orchestrator.Event{Type: orchestrator.EventRunStarted, RunStarted: &orchestrator.RunStarted{Steps: 8}})
	if out.Len() != 0 {
		t.Fatalf("a new run printed %q", out.String())
	}
}

// TestRunViewPace: off a terminal each committed step's line carries the
// run's progress: step k/N, the time since the run began playing, and
// once a training step is committed, seconds per step and the time left.
func TestRunViewPace(t *testing.T) {
	var out bytes.Buffer
	v := &runView{w: &out}
	t0 := time.Date(2026, 5, 1, 9, 30, 0, 0, time.Local)
	v.event(orchestrator.Event{Type: orchestrator.EventRunStarted, Time: t0, RunStarted: &orchestrator.RunStarted{Steps: 4}})
	for _, c := range []struct {
		step int
		at   time.Duration
	}{{0, 10 * time.Second}, {1, 40 * time.Second}, {2, 70 * time.Second}, {3, 100 * time.Second}, {4, 130 * time.Second}} {
		v.event(orchestrator.Event{Type: orchestrator.EventStepCommitted, Step: c.step, Time: t0.Add(c.at), StepCommitted: &orchestrator.StepCommitted{Step: c.step, Job: &checkpoint.Job{}}})
	}
	// 40 s for the first training step: 3 more take 2m; 70 s for two:
	// 35 s each, 2 more take 1m10s; 100 s for three: 33.3 s, 1 more.
	want := `2026-05-01 09:30:10 step  0 committed  [0/4, 10s elapsed]
2026-05-01 09:30:40 step  1 committed  [1/4, 40s elapsed, 40.0 s/step, ETA 2m0s]
2026-05-01 09:31:10 step  2 committed  [2/4, 1m10s elapsed, 35.0 s/step, ETA 1m10s]
2026-05-01 09:31:40 step  3 committed  [3/4, 1m40s elapsed, 33.3 s/step, ETA 33s]
2026-05-01 09:32:10 step  4 committed  [4/4, 2m10s elapsed, 32.5 s/step]
`
	if got := out.String(); got != want {
		t.Fatalf("output\n%s\nwant\n%s", got, want)
	}
}
