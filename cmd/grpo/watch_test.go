package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/orchestrator"
)

// TestEventLine decodes events in their documented JSON form
// (docs/EVENTS.md) and checks what watch prints for each.
func TestEventLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"type":"run_started","run":"r","step":2,"data":{"steps":4,"resumed":true,"from":2}}`, "steps 4 from 2 resumed true"},
		{`{"type":"step_started","run":"r","step":2,"data":{"n":5,"episodes":6,"validation":8}}`, "n=5 train episodes 6 validation 8"},
		{`{"type":"episode_finished","run":"r","step":2,"data":{"split":"train","id":"s2-g0-e1","reward":0.25,"meals":3,"deadlocked":true,"invalid":1}}`,
			"train s2-g0-e1 reward 0.250 meals 3 deadlocked true invalid 1"},
		{`{"type":"job_state","run":"r","step":2,"data":{"id":"r/step-0002","state":"running","progress":0.5}}`, "job r/step-0002 running 50%"},
		{`{"type":"adapter_loaded","run":"r","step":2,"data":{"name":"r/step-0002","path":"/x"}}`, "adapter r/step-0002"},
		{`{"type":"validation_done","run":"r","step":2,"data":{"reward_mean":0.5,"deadlock_rate":0.25,"meals_mean":4}}`, "reward 0.500 deadlock rate 0.25 meals 4.00"},
		{`{"type":"best_changed","run":"r","step":2,"data":{"step":1,"value":0.75}}`, "best step 1 (0.750)"},
		{`{"type":"step_committed","run":"r","step":2,"data":{"step":2,"train":{"reward_mean":0.125}}}`, "train reward 0.125"},
		{`{"type":"run_finished","run":"r","step":4,"data":{"state":"failed","error":"boom"}}`, "failed: boom"},
		{`{"type":"from_the_future","run":"r","step":4,"data":{"x":1}}`, "from_the_future"},
	} {
		var e orchestrator.Event
		if err := json.Unmarshal([]byte(c.in), &e); err != nil {
			t.Fatalf("decode %s: %v", c.in, err)
		}
		if got := eventLine(e); !strings.HasSuffix(got, c.want) || !strings.Contains(got, " r ") {
			t.Errorf("eventLine(%s)=%q, want it to end with %q", c.in, got, c.want)
		}
	}
}
