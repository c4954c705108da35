package checkpoint_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
)

// TestRunViewValidationTerms: a step's validation_terms are the means of
// the four reward terms over its records, errored records left out
// (hand-computed), and absent when the evaluation kept no records.
func TestRunViewValidationTerms(t *testing.T) {
	recs := []checkpoint.EpisodeRecord{
		{N: 5, Terms: checkpoint.RewardTerms{NoDeadlock: 1, Throughput: 0.5, Unfairness: -0.2, Idle: -0.1}},
		{N: 5, Terms: checkpoint.RewardTerms{NoDeadlock: 0, Throughput: 0.25, Unfairness: -0.4, Idle: -0.3}},
		{N: 6, Errored: true, Terms: checkpoint.RewardTerms{NoDeadlock: 9, Throughput: 9, Unfairness: 9, Idle: 9}},
		{N: 6, Terms: checkpoint.RewardTerms{NoDeadlock: 1, Throughput: 0.75, Unfairness: 0, Idle: -0.2}},
	}
	steps := []checkpoint.Step{{Step: 0, N: 5}, {Step: 1, N: 5}, {Step: 2, N: 5}}
	evals := []checkpoint.Evaluation{{Step: 0, Records: recs}, {Step: 1}}
	v := checkpoint.NewRunView(checkpoint.Run{Name: "r"}, steps, evals)
	got := v.Steps[0].ValidationTerms
	if got == nil {
		t.Fatal("step 0: no validation_terms")
	}
	// (1+0+1)/3, (0.5+0.25+0.75)/3, (-0.2-0.4+0)/3, (-0.1-0.3-0.2)/3
	want := checkpoint.RewardTerms{NoDeadlock: 2.0 / 3, Throughput: 0.5, Unfairness: -0.2, Idle: -0.2}
	for _, c := range []struct {
		name    string
		got, wt float64
	}{{"r_nd", got.NoDeadlock, want.NoDeadlock}, {"r_thru", got.Throughput, want.Throughput},
		{"r_fair", got.Unfairness, want.Unfairness}, {"r_idle", got.Idle, want.Idle}} {
		if d := c.got - c.wt; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s mean %v, want %v", c.name, c.got, c.wt)
		}
	}
	if v.Steps[1].ValidationTerms != nil || v.Steps[2].ValidationTerms != nil {
		t.Errorf("steps without records have terms: %+v, %+v", v.Steps[1].ValidationTerms, v.Steps[2].ValidationTerms)
	}
	b, err := json.Marshal(v.Steps[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"validation_terms":{"r_nd":0.666`) {
		t.Errorf("JSON: %s", b)
	}
	b, _ = json.Marshal(v.Steps[1])
	if strings.Contains(string(b), "validation_terms") {
		t.Errorf("step without records: %s", b)
	}
	if checkpoint.TermMeans([]checkpoint.EpisodeRecord{{Errored: true}}) != nil {
		t.Error("TermMeans of only errored records is not nil")
	}
}

// TestRunViewDataDir: the data directory recorded with a run (the
// embedded backend's adapters and jobs) is in the view, as README says
// (`data_dir` in `grpo runs show RUN --json`), and absent when none is
// recorded (other backends, older stores).
func TestRunViewDataDir(t *testing.T) {
	v := checkpoint.NewRunView(checkpoint.Run{Name: "r", DataDir: "/srv/grpo.db.data"}, nil, nil)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"data_dir":"/srv/grpo.db.data"`) {
		t.Errorf("run with a data directory: %s", b)
	}
	b, _ = json.Marshal(checkpoint.NewRunView(checkpoint.Run{Name: "r"}, nil, nil))
	if strings.Contains(string(b), "data_dir") {
		t.Errorf("run without one: %s", b)
	}
}
