package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
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
		{`{"type":"endpoint_state","run":"r","step":3,"data":{"endpoint":"http://a/v1","up":false,"error":"connection refused","probe_in_seconds":2}}`,
			"inference endpoint http://a/v1 down: connection refused (probed again in 2 s)"},
		{`{"type":"endpoint_state","run":"r","step":3,"data":{"endpoint":"http://a/v1","up":true}}`, "inference endpoint http://a/v1 answers again: readmitted"},
		{`{"type":"warning","run":"r","step":0,"data":{"code":"learning_rate","message":"trainer.hyperparameters.learning_rate 5e-06 is far from what the embedded backend learns with"}}`,
			"warning           trainer.hyperparameters.learning_rate 5e-06 is far from what the embedded backend learns with"},
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

// checkLineEnds fails t unless out has one line per wantEnds, each ending
// with its entry.
func checkLineEnds(t *testing.T, out string, wantEnds []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(wantEnds) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(wantEnds), out)
	}
	for i, w := range wantEnds {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d %q, want it to end with %q", i, lines[i], w)
		}
	}
}

func decodeEvents(t *testing.T, lines ...string) []orchestrator.Event {
	t.Helper()
	var out []orchestrator.Event
	for _, l := range lines {
		var e orchestrator.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("decode %s: %v", l, err)
		}
		out = append(out, e)
	}
	return out
}

// TestWatchOneLinePerStep feeds a two-step run's events to the printer:
// by default one line per step (plus the run's start and end, and a
// progress line as a step passes a quarter of its episodes), with
// --episodes one line per episode instead of the progress lines.
func TestWatchOneLinePerStep(t *testing.T) {
	events := decodeEvents(t,
		`{"type":"run_started","run":"r","step":0,"data":{"steps":2,"from":0}}`,
		`{"type":"step_started","run":"r","step":0,"data":{"n":5,"validation":2}}`,
		`{"type":"episode_finished","run":"r","step":0,"data":{"split":"validation","id":"v0-n5-e0","reward":0.5}}`,
		`{"type":"episode_finished","run":"r","step":0,"data":{"split":"validation","id":"v0-n5-e1","reward":0.25}}`,
		`{"type":"validation_done","run":"r","step":0,"data":{"step":0,"reward_mean":0.375,"reward_ci95":[0.1,0.65],"deadlock_rate":0.5,"meals_mean":2}}`,
		`{"type":"step_committed","run":"r","step":0,"data":{"step":0,"n":5}}`,
		`{"type":"best_changed","run":"r","step":0,"data":{"step":0,"value":0.375}}`,
		`{"type":"step_started","run":"r","step":1,"data":{"n":5,"episodes":2}}`,
		`{"type":"episode_finished","run":"r","step":1,"data":{"split":"train","id":"s1-g0-e0","reward":1}}`,
		`{"type":"job_state","run":"r","step":1,"data":{"id":"r/step-0001","state":"running","progress":0.5}}`,
		`{"type":"adapter_loaded","run":"r","step":1,"data":{"name":"r/step-0001","path":"/x"}}`,
		`{"type":"step_committed","run":"r","step":1,"data":{"step":1,"n":5,"train":{"reward_mean":0.75},"job":{"id":"r/step-0001","state":"succeeded","metrics":{"loss":0.125,"kl":0.01}}}}`,
		`{"type":"step_started","run":"r","step":2,"data":{"n":5,"episodes":2}}`,
		`{"type":"step_committed","run":"r","step":2,"data":{"step":2,"n":5,"train":{"reward_mean":0.5}}}`,
		`{"type":"run_finished","run":"r","step":2,"data":{"state":"succeeded"}}`,
	)
	var b strings.Builder
	p := &stepPrinter{w: &b}
	for _, e := range events {
		p.event(e)
	}
	wantEnds := []string{
		"steps 2 from 0 resumed false",
		"step  0 progress          1/2 episodes",
		"step  0 n=5  validation 0.375 [0.100, 0.650] deadlock 0.50 meals 2.00  best 0 (0.375)",
		"step  1 progress          1/2 episodes",
		"step  1 n=5  train 0.750  loss 0.125 kl 0.01",
		"step  2 n=5  train 0.500  (no signal: no job)",
		"run_finished      succeeded",
	}
	checkLineEnds(t, b.String(), wantEnds)
	b.Reset()
	p = &stepPrinter{w: &b, episodes: true}
	for _, e := range events {
		p.event(e)
	}
	if got := strings.Count(b.String(), "\n"); got != len(wantEnds)-2+3 {
		t.Fatalf("--episodes: %d lines, want %d:\n%s", got, len(wantEnds)-2+3, b.String())
	}
	if strings.Contains(b.String(), "progress") {
		t.Fatalf("--episodes prints progress lines too:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "train s1-g0-e0 reward 1.000") {
		t.Fatalf("--episodes lacks the episode line:\n%s", b.String())
	}
}

// TestWatchPrintsEndpointChanges: a drained endpoint and its readmission
// are lines of their own, after the step line the run held (the step
// printer dropped endpoint_state events, so watch printed neither).
func TestWatchPrintsEndpointChanges(t *testing.T) {
	events := decodeEvents(t,
		`{"type":"step_committed","run":"r","step":3,"data":{"step":3,"n":5,"train":{"reward_mean":0.5}}}`,
		`{"type":"endpoint_state","run":"r","step":4,"data":{"endpoint":"http://b/v1","up":false,"error":"health: GET http://b/health: 503 Service Unavailable","probe_in_seconds":2,"probe_every_seconds":2}}`,
		`{"type":"step_committed","run":"r","step":4,"data":{"step":4,"n":5,"train":{"reward_mean":0.25}}}`,
		`{"type":"endpoint_state","run":"r","step":5,"data":{"endpoint":"http://b/v1","up":true}}`,
		`{"type":"run_finished","run":"r","step":5,"data":{"state":"succeeded"}}`,
	)
	var b strings.Builder
	p := &stepPrinter{w: &b}
	for _, e := range events {
		p.event(e)
	}
	wantEnds := []string{
		"step  3 n=5  train 0.500  (no signal: no job)",
		"step  4 endpoint_state    inference endpoint http://b/v1 down: health: GET http://b/health: 503 Service Unavailable (probed again in 2 s)",
		"step  4 n=5  train 0.250  (no signal: no job)",
		"step  5 endpoint_state    inference endpoint http://b/v1 answers again: readmitted",
		"run_finished      succeeded",
	}
	checkLineEnds(t, b.String(), wantEnds)
}

// TestWatchPrintsWarnings: a run's warnings are lines of their own, in
// the order of the events: the start's after run_started, the end's after
// the last step's line and before run_finished.
func TestWatchPrintsWarnings(t *testing.T) {
	events := decodeEvents(t,
		`{"type":"run_started","run":"r","step":0,"data":{"steps":1,"from":0}}`,
		`{"type":"warning","run":"r","step":0,"data":{"code":"learning_rate","message":"the rate is far off"}}`,
		`{"type":"step_committed","run":"r","step":1,"data":{"step":1,"n":5,"train":{"reward_mean":0.5}}}`,
		`{"type":"warning","run":"r","step":1,"data":{"code":"validation_unchanged","message":"nothing changed"}}`,
		`{"type":"run_finished","run":"r","step":1,"data":{"state":"succeeded"}}`,
	)
	var b strings.Builder
	p := &stepPrinter{w: &b}
	for _, e := range events {
		p.event(e)
	}
	wantEnds := []string{
		"steps 1 from 0 resumed false",
		"step  0 warning           the rate is far off",
		"step  1 n=5  train 0.500  (no signal: no job)",
		"step  1 warning           nothing changed",
		"run_finished      succeeded",
	}
	checkLineEnds(t, b.String(), wantEnds)
}

func TestDaemonURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8080":         "http://127.0.0.1:8080",
		"localhost:9":            "http://localhost:9",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://grpo.example":   "https://grpo.example",
		"http://h:1/prefix/":     "http://h:1/prefix",
	} {
		u, err := daemonURL(in)
		if err != nil || u.String() != want {
			t.Errorf("daemonURL(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, in := range []string{"", "127.0.0.1", "ftp://h:1", "h:1/x", "http://"} {
		if _, err := daemonURL(in); err == nil || !strings.Contains(err.Error(), "--addr") {
			t.Errorf("daemonURL(%q): %v, want an error naming --addr", in, err)
		}
	}
}

// TestWatchPollKeepsLiveLine: a step whose commit arrived on the live
// stream but whose line is still held (no best change: it waits for the
// next step's events) is printed as it arrived when the quiet-stream poll
// finds it stored, not as a step caught up "(while reconnecting)" with
// its job's finish time: watch never reconnected.
func TestWatchPollKeepsLiveLine(t *testing.T) {
	var b strings.Builder
	p := &stepPrinter{w: &b}
	// watch joins after step 0.
	p.catchUp(checkpoint.RunView{Run: "r", State: checkpoint.StateRunning, Steps: []checkpoint.StepView{{Step: 0, N: 5}}}, false)
	for _, e := range decodeEvents(t,
		`{"type":"validation_done","run":"r","step":1,"time":"2026-01-02T15:04:05.123Z","data":{"step":1,"reward_mean":0.5,"reward_ci95":[0.25,0.75],"deadlock_rate":0.5,"meals_mean":2}}`,
		`{"type":"step_committed","run":"r","step":1,"time":"2026-01-02T15:04:05.123Z","data":{"step":1,"n":5,"train":{"reward_mean":0.75},"job":{"id":"r/step-0001","state":"succeeded","metrics":{"loss":0.125,"kl":0.01}}}}`,
	) {
		p.event(e)
	}
	// The poll while the stream is quiet: step 1 is stored.
	val := &checkpoint.Evaluation{Step: 1, RewardMean: 0.5, RewardCI95: [2]float64{0.25, 0.75}, DeadlockRate: 0.5, MealsMean: 2}
	polled := checkpoint.RunView{Run: "r", State: checkpoint.StateRunning, Steps: []checkpoint.StepView{
		{Step: 0, N: 5},
		{Step: 1, N: 5, Train: &checkpoint.TrainStats{RewardMean: 0.75}, Validation: val,
			Job: &checkpoint.Job{ID: "r/step-0001", State: "succeeded", Metrics: map[string]float64{"loss": 0.125, "kl": 0.01}}},
	}}
	p.catchUp(polled, true)
	p.catchUp(polled, true) // step 1 was stored at the previous poll too
	// Step 2's events flush whatever is still held.
	for _, e := range decodeEvents(t,
		`{"type":"step_committed","run":"r","step":2,"data":{"step":2,"n":5,"train":{"reward_mean":0.5}}}`,
	) {
		p.event(e)
	}
	p.flush()
	text := b.String()
	if strings.Contains(text, "reconnecting") {
		t.Errorf("a step seen live is printed as caught up after a reconnect:\n%s", text)
	}
	if n := strings.Count(text, "step  1 n=5  train 0.750  validation 0.500"); n != 1 {
		t.Errorf("step 1 printed %d times, want once with its validation:\n%s", n, text)
	}
	if n := strings.Count(text, "step  2 n=5"); n != 1 {
		t.Errorf("step 2 printed %d times, want once:\n%s", n, text)
	}
}

// TestWatchPollWaitsForTheEvent: the quiet stream's poll finds a step
// stored before its step_committed event has come (it comes just after
// the commit; seconds later on a loaded machine). It must not print it
// as caught up "(while reconnecting)": the event prints it. A step still
// without its event at the next poll was missed, and is printed then.
func TestWatchPollWaitsForTheEvent(t *testing.T) {
	var b strings.Builder
	p := &stepPrinter{w: &b}
	stored := func(n int) checkpoint.RunView {
		v := checkpoint.RunView{Run: "r", State: checkpoint.StateRunning}
		for i := 0; i <= n; i++ {
			v.Steps = append(v.Steps, checkpoint.StepView{Step: i, N: 5, Train: &checkpoint.TrainStats{RewardMean: 0.25 * float64(i)}})
		}
		return v
	}
	p.catchUp(stored(0), false) // watch joins after step 0
	p.catchUp(stored(1), true)  // a poll: step 1 is stored, its event on its way
	if b.Len() != 0 {
		t.Fatalf("the poll printed a step whose event had not come yet:\n%s", b.String())
	}
	for _, e := range decodeEvents(t,
		`{"type":"step_committed","run":"r","step":1,"data":{"step":1,"n":5,"train":{"reward_mean":0.25}}}`,
	) {
		p.event(e)
	}
	p.catchUp(stored(2), true) // step 2 stored, its event on its way
	p.catchUp(stored(2), true) // ... and never came: missed
	p.flush()
	text := b.String()
	if n := strings.Count(text, "step  1 n=5  train 0.250"); n != 1 || strings.Contains(text, "train 0.250  (no signal: no job)  (while reconnecting)") {
		t.Errorf("step 1 printed %d times or as caught up; want once, from its event:\n%s", n, text)
	}
	if n := strings.Count(text, "step  2 n=5  train 0.500"); n != 1 || !strings.Contains(text, "(while reconnecting)") {
		t.Errorf("step 2 printed %d times; want once, caught up at the second poll:\n%s", n, text)
	}
}

// TestWatchReadsAMissedValidation: a stream that begins after a step's
// validation_done (with an asynchronous pipeline it comes a whole training
// step before the commit) prints that step with its stored validation;
// later steps take theirs from the stream, without asking the daemon.
func TestWatchReadsAMissedValidation(t *testing.T) {
	events := decodeEvents(t,
		`{"type":"step_started","run":"r","step":5,"data":{"n":5,"episodes":0,"validation":2}}`,
		`{"type":"step_committed","run":"r","step":4,"data":{"step":4,"n":5,"train":{"reward_mean":0.5}}}`,
		`{"type":"validation_done","run":"r","step":5,"data":{"step":5,"reward_mean":0.625,"reward_ci95":[0.5,0.75],"deadlock_rate":0.25,"meals_mean":3}}`,
		`{"type":"step_committed","run":"r","step":5,"data":{"step":5,"n":5,"train":{"reward_mean":0.75}}}`,
		`{"type":"step_committed","run":"r","step":6,"data":{"step":6,"n":5,"train":{"reward_mean":0.25}}}`,
	)
	var b strings.Builder
	p := &stepPrinter{w: &b}
	var asked []string
	p.connected(func(run string, step int) *orchestrator.ValidationDone {
		asked = append(asked, fmt.Sprintf("%s/%d", run, step))
		return &orchestrator.ValidationDone{RewardMean: 0.375, RewardCI95: [2]float64{0.25, 0.5}, DeadlockRate: 0.5, MealsMean: 2}
	})
	for _, e := range events {
		p.event(e)
	}
	p.flush()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for i, want := range []string{
		"step  4 n=5  train 0.500  validation 0.375 [0.250, 0.500] deadlock 0.50 meals 2.00",
		"step  5 n=5  train 0.750  validation 0.625 [0.500, 0.750] deadlock 0.25 meals 3.00",
		"step  6 n=5  train 0.250  (no signal: no job)",
	} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q, want it to contain %q", i, lines[i], want)
		}
	}
	if !slices.Equal(asked, []string{"r/4"}) {
		t.Errorf("asked the daemon for %v, want only the first step's validation (r/4)", asked)
	}
}

// TestWatchPrintsInEventOrder: with --episodes, a step's line comes
// before the events that came after its commit; it was held for a best
// change that did not come, and printed after the next step's episodes.
// A best change that comes after another line (episodes of a step
// sampled ahead play meanwhile) gets a line of its own.
func TestWatchPrintsInEventOrder(t *testing.T) {
	events := decodeEvents(t,
		`{"type":"step_committed","run":"r","step":1,"data":{"step":1,"n":5,"train":{"reward_mean":0.75},"job":{"id":"r/step-0001","state":"succeeded","metrics":{"loss":0.125,"kl":0.01}}}}`,
		`{"type":"step_started","run":"r","step":2,"data":{"n":5,"episodes":1}}`,
		`{"type":"episode_finished","run":"r","step":2,"data":{"split":"train","id":"s2-g0-e0","reward":1}}`,
		`{"type":"step_committed","run":"r","step":2,"data":{"step":2,"n":5,"train":{"reward_mean":0.5}}}`,
		`{"type":"episode_finished","run":"r","step":4,"data":{"split":"train","id":"s4-g0-e0","reward":0.25}}`,
		`{"type":"best_changed","run":"r","step":2,"data":{"step":2,"value":0.5}}`,
		`{"type":"step_committed","run":"r","step":3,"data":{"step":3,"n":5,"train":{"reward_mean":0.25}}}`,
		`{"type":"best_changed","run":"r","step":3,"data":{"step":3,"value":0.625}}`,
	)
	var b strings.Builder
	p := &stepPrinter{w: &b, episodes: true}
	for _, e := range events {
		p.event(e)
	}
	p.flush()
	wantEnds := []string{
		"step  1 n=5  train 0.750  loss 0.125 kl 0.01",
		"step  2 episode_finished  train s2-g0-e0 reward 1.000 meals 0 deadlocked false invalid 0",
		"step  2 n=5  train 0.500  (no signal: no job)",
		"step  4 episode_finished  train s4-g0-e0 reward 0.250 meals 0 deadlocked false invalid 0",
		"step  2 best_changed      best step 2 (0.500)",
		"step  3 n=5  train 0.250  (no signal: no job)  best 3 (0.625)",
	}
	checkLineEnds(t, b.String(), wantEnds)
}

// TestWatchStepProgress: without --episodes, a step's progress is printed
// as it passes each quarter of the episodes its step_started announced
// (training and validation), not at the last one; episodes of a step
// sampled ahead, before its step_started, are not counted.
func TestWatchStepProgress(t *testing.T) {
	lines := []string{`{"type":"episode_finished","run":"r","step":4,"data":{"split":"train","id":"s4-g0-e0"}}`,
		`{"type":"step_started","run":"r","step":3,"data":{"n":5,"episodes":6,"validation":2}}`}
	for i := range 8 {
		lines = append(lines, fmt.Sprintf(`{"type":"episode_finished","run":"r","step":3,"data":{"split":"train","id":"s3-g0-e%d"}}`, i))
	}
	var b strings.Builder
	p := &stepPrinter{w: &b}
	for _, e := range decodeEvents(t, lines...) {
		p.event(e)
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{"step  3 progress          2/8 episodes", "step  3 progress          4/8 episodes", "step  3 progress          6/8 episodes"}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(got[i], w) {
			t.Errorf("line %d %q, want it to end with %q", i, got[i], w)
		}
	}
}
