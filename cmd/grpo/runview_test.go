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
