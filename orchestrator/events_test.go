package orchestrator_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
)

// sampleEvents has one event of every type, every payload field set.
func sampleEvents() []orchestrator.Event {
	at := time.Date(2026, 1, 2, 15, 4, 5, 123e6, time.UTC)
	a := &orchestrator.Adapter{Name: "r/step-0001", Path: "/data/adapters/r/step-0001"}
	ev := func(typ string, step int) orchestrator.Event {
		return orchestrator.Event{Type: typ, Run: "r", Step: step, Time: at}
	}
	var out []orchestrator.Event
	e := ev(orchestrator.EventRunStarted, 0)
	e.RunStarted = &orchestrator.RunStarted{Steps: 4, Resumed: true, From: 2}
	out = append(out, e)
	e = ev(orchestrator.EventStepStarted, 2)
	e.StepStarted = &orchestrator.StepStarted{N: 5, Episodes: 6, Validation: 8, Reattach: true}
	out = append(out, e)
	e = ev(orchestrator.EventEpisodeFinished, 2)
	e.EpisodeFinished = &orchestrator.EpisodeFinished{Split: "train", ID: "s2-g0-e1", N: 5, Reward: 0.25, Errored: true,
		Deadlock: true, Meals: 3, Invalid: 1, Calls: 25, Seconds: 0.5}
	out = append(out, e)
	e = ev(orchestrator.EventJobState, 2)
	e.JobState = &orchestrator.JobState{ID: "r/step-0002", State: "succeeded", Progress: 1,
		Metrics: &orchestrator.JobMetrics{Loss: 0.5, KL: 0.01, GradNorm: 2, ClipFraction: 0.1}, Adapter: a, Error: "none"}
	out = append(out, e)
	e = ev(orchestrator.EventAdapterLoaded, 2)
	e.AdapterLoaded = &orchestrator.AdapterLoaded{Adapter: *a}
	out = append(out, e)
	e = ev(orchestrator.EventValidationDone, 2)
	e.ValidationDone = &orchestrator.ValidationDone{Step: 2, Episodes: 8, Errored: 1, RewardMean: 0.5, RewardStd: 0.1,
		RewardCI95: [2]float64{0.4, 0.6}, DeadlockRate: 0.25, MealsMean: 4, InvalidRate: 0.05,
		PerN:    []orchestrator.ValidationAtN{{N: 5, Episodes: 7, RewardMean: 0.5, DeadlockRate: 0.25, MealsMean: 4}},
		Rewards: []float64{0.5, 0.25}}
	out = append(out, e)
	e = ev(orchestrator.EventBestChanged, 2)
	e.BestChanged = &orchestrator.BestChanged{Policy: "best-validation", Step: 2, Value: 0.5, Scored: true, LastStep: 2, LastValue: 0.5, Adapter: a}
	out = append(out, e)
	e = ev(orchestrator.EventStepCommitted, 2)
	e.StepCommitted = &orchestrator.StepCommitted{Step: 2, N: 5,
		Train: &orchestrator.TrainSummary{RewardMean: 0.1, RewardStd: 0.2, Episodes: 6, Errored: 1, DeadlockRate: 0.5,
			MealsMean: 2, InvalidRate: 0.1, ZeroVarianceGroups: 1, FracRewardZeroStd: 0.5, Trajectories: 3,
			Groups: []orchestrator.GroupSummary{{ID: "s2-g0", Seed: 9, N: 5, Rewards: []float64{0, 1}, Mean: 0.5, Std: 0.5, ZeroVariance: true, Resampled: true}}},
		Adapter:   a,
		Job:       &checkpoint.Job{ID: "r/step-0002", State: "succeeded", Metrics: map[string]float64{"loss": 0.5}, Error: "x", Submitted: at, Finished: at.Add(time.Second)},
		Seconds:   map[string]float64{"rollout": 1},
		Committed: at,
	}
	out = append(out, e)
	e = ev(orchestrator.EventRunFinished, 4)
	e.RunFinished = &orchestrator.RunFinished{State: "failed", Error: "step 3: boom"}
	out = append(out, e)
	e = ev(orchestrator.EventEndpointState, 4)
	e.EndpointState = &orchestrator.EndpointState{Endpoint: "http://127.0.0.1:8000/v1", Error: "connection refused", ProbeIn: 2, ProbeEvery: 2}
	out = append(out, e)
	e = ev(orchestrator.EventWarning, 0)
	e.Warning = &orchestrator.Warning{Code: "learning_rate", Message: "trainer.hyperparameters.learning_rate 5e-06 is far from what the embedded backend learns with"}
	out = append(out, e)
	return out
}

func TestEventJSONRoundTrip(t *testing.T) {
	events := sampleEvents()
	var types []string
	for _, want := range events {
		types = append(types, want.Type)
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", want.Type, err)
		}
		var got orchestrator.Event
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s round trip:\n got %+v\nwant %+v\njson %s", want.Type, got, want, b)
		}
	}
	if got, want := types, []string{
		orchestrator.EventRunStarted, orchestrator.EventStepStarted, orchestrator.EventEpisodeFinished,
		orchestrator.EventJobState, orchestrator.EventAdapterLoaded, orchestrator.EventValidationDone,
		orchestrator.EventBestChanged, orchestrator.EventStepCommitted, orchestrator.EventRunFinished,
		orchestrator.EventEndpointState, orchestrator.EventWarning,
	}; !slices.Equal(got, want) {
		t.Fatalf("sampled types %v, want every type %v", got, want)
	}
}

// TestEventJSONForm pins the documented form (docs/EVENTS.md): the
// envelope, and data's keys per type.
func TestEventJSONForm(t *testing.T) {
	want := map[string][]string{
		"run_started":      {"from", "resumed", "steps"},
		"step_started":     {"episodes", "n", "reattach", "validation"},
		"episode_finished": {"calls", "deadlocked", "errored", "id", "invalid", "meals", "n", "reward", "seconds", "split"},
		"job_state":        {"adapter", "error", "id", "metrics", "progress", "state"},
		"adapter_loaded":   {"name", "path"},
		"validation_done":  {"deadlock_rate", "episodes", "errored", "invalid_rate", "meals_mean", "per_n", "reward_ci95", "reward_mean", "reward_std", "rewards", "step"},
		"best_changed":     {"adapter", "last_step", "last_value", "policy", "scored", "step", "value"},
		"step_committed":   {"adapter", "committed", "job", "n", "seconds", "step", "train"},
		"run_finished":     {"error", "state"},
		"endpoint_state":   {"endpoint", "error", "probe_every_seconds", "probe_in_seconds", "up"},
		"warning":          {"code", "message"},
	}
	for _, e := range sampleEvents() {
		b, _ := json.Marshal(e)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if got := keys(m); !slices.Equal(got, []string{"data", "run", "step", "time", "type"}) {
			t.Fatalf("%s envelope keys %v", e.Type, got)
		}
		var data map[string]json.RawMessage
		if err := json.Unmarshal(m["data"], &data); err != nil {
			t.Fatal(err)
		}
		if got := keys(data); !slices.Equal(got, want[e.Type]) {
			t.Errorf("%s data keys %v, want %v", e.Type, got, want[e.Type])
		}
	}
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestEventDecodeTolerates(t *testing.T) {
	for _, c := range []struct {
		name, in string
		want     orchestrator.Event
	}{
		{"no data", `{"type":"step_started","run":"a","step":1,"time":"2026-01-02T15:04:05Z"}`,
			orchestrator.Event{Type: "step_started", Run: "a", Step: 1, Time: time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)}},
		{"unknown type keeps the envelope", `{"type":"future_thing","run":"a","step":2,"data":{"x":1}}`,
			orchestrator.Event{Type: "future_thing", Run: "a", Step: 2}},
		{"unknown field", `{"type":"run_finished","run":"a","data":{"state":"succeeded","later":true}}`,
			orchestrator.Event{Type: "run_finished", Run: "a", RunFinished: &orchestrator.RunFinished{State: "succeeded"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got orchestrator.Event
			if err := json.Unmarshal([]byte(c.in), &got); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
	var e orchestrator.Event
	if err := json.Unmarshal([]byte(`{"type":"job_state","data":{"progress":"half"}}`), &e); err == nil {
		t.Fatal("a payload of the wrong shape decoded without error")
	}
	if b, _ := json.Marshal(orchestrator.Event{Type: orchestrator.EventRunFinished, Run: "a"}); string(b) != `{"type":"run_finished","run":"a","step":0,"time":"0001-01-01T00:00:00Z"}` {
		t.Fatalf("event without payload encodes as %s", b)
	}
}
