package main

import (
	"bytes"
	"strings"
	"testing"

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
	v.event(orchestrator.Event{Type: orchestrator.EventRunStarted, Step: 3, RunStarted: &orchestrator.RunStarted{Steps: 8, Resumed: true, From: 3}})
	v.event(orchestrator.Event{Type: orchestrator.EventStepStarted, Step: 3, StepStarted: &orchestrator.StepStarted{N: 5, Reattach: true}})
	want := "resuming at step 3 of 8 (the steps before it are stored)\nstep  3: its trainer job was submitted before the restart; waiting for it\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
	out.Reset()
	v.event(orchestrator.Event{Type: orchestrator.EventRunStarted, RunStarted: &orchestrator.RunStarted{Steps: 8}})
	if out.Len() != 0 {
		t.Fatalf("a new run printed %q", out.String())
	}
}
