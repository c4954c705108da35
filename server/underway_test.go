package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestShowRunUnderway: GET /api/v1/runs/{id} carries what grpo runs show
// --json does about what a run has under way: in_flight (the trainer job
// of the newest step not committed), validating (the step being validated)
// and lease (the process that plays the run), each absent when there is
// none. It carried none of them. The runs are played by this test's
// process (it holds their leases), so the daemon leaves them alone.
func TestShowRunUnderway(t *testing.T) {
	e := newEnv(t)
	underwayRuns(t, e.store, "busy/step-0002")
	s := e.MustStart(t, server.Options{})
	get := func(name string) map[string]json.RawMessage {
		t.Helper()
		code, body := do(t, "GET", s.URL()+"/api/v1/runs/"+name, "", "")
		if code != 200 {
			t.Fatalf("GET %s = %d %s", name, code, body)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("GET %s: %v\n%s", name, err, body)
		}
		return m
	}
	host, _ := os.Hostname()
	lease := func(name string, m map[string]json.RawMessage) {
		t.Helper()
		var l map[string]any
		if err := json.Unmarshal(m["lease"], &l); err != nil {
			t.Errorf("%s: lease %q: %v", name, m["lease"], err)
			return
		}
		if l["pid"] != float64(os.Getpid()) || l["host"] != host || l["live"] != true || l["started"] == nil || l["heartbeat"] == nil || len(l) != 5 {
			t.Errorf("%s: lease %s, want this process's (pid %d on %s), live, with started and heartbeat", name, m["lease"], os.Getpid(), host)
		}
	}

	busy := get("busy")
	if got, want := busy["in_flight"], `{"step":2,"n":6,"job_id":"busy/step-0002","submitted":"2026-01-02T15:05:35Z"}`; compact(got) != want {
		t.Errorf("busy: in_flight %s, want %s", got, want)
	}
	if got := string(busy["validating"]); got != "1" {
		t.Errorf("busy: validating %s, want 1", got)
	}
	lease("busy", busy)

	idle := get("idle")
	for _, k := range []string{"in_flight", "validating"} {
		if v, ok := idle[k]; ok {
			t.Errorf("idle: %s %s, want it absent (no job in flight)", k, v)
		}
	}
	lease("idle", idle)

	done := get("done")
	for _, k := range []string{"in_flight", "validating", "lease"} {
		if v, ok := done[k]; ok {
			t.Errorf("done: %s %s, want it absent (a finished run no process holds)", k, v)
		}
	}
	if string(done["state"]) != `"succeeded"` {
		t.Errorf("done: state %s", done["state"])
	}
}

// underwayRuns stores "busy" (running, asynchronous pipeline: step 1
// validates while step 2's job, job2, trains; submitted at the time
// returned), "idle" (running, between steps, no job in flight) and "done"
// (succeeded, no lease, nothing under way). This process holds the leases
// of the running ones, so a daemon leaves them alone.
func underwayRuns(t *testing.T, store *checkpoint.Store, job2 string) time.Time {
	t.Helper()
	ctx := context.Background()
	create := func(name, state string) {
		t.Helper()
		if err := store.CreateRun(ctx, checkpoint.Run{Name: name, State: state, Steps: 4, Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean, Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		ev := &checkpoint.Evaluation{Step: 0, Episodes: 2, RewardMean: 0.25, Rewards: []float64{0.25, 0.25}}
		if err := store.CommitStep(ctx, name, checkpoint.Step{Step: 0, N: 5}, ev); err != nil {
			t.Fatal(err)
		}
	}
	create("busy", checkpoint.StateRunning)
	at1 := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	at2 := at1.Add(90 * time.Second)
	for _, inf := range []checkpoint.InFlight{
		{Step: 1, N: 5, JobID: "busy/step-0001", Submitted: at1},
		{Step: 2, N: 6, JobID: job2, Submitted: at2},
	} {
		if err := store.SetInFlight(ctx, "busy", inf); err != nil {
			t.Fatal(err)
		}
	}
	create("idle", checkpoint.StateRunning)
	for _, name := range []string{"busy", "idle"} {
		if _, err := store.AcquireLease(ctx, name, checkpoint.LeaseOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("done", checkpoint.StateSucceeded)
	return at2
}

// compact is JSON without spaces, its keys in their order ("" for none).
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
