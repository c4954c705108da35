package server

import (
	"encoding/json"

	"github.com/grpo-dev/grpo/checkpoint"
)

// The API's JSON shapes are those of `grpo runs --json`, `grpo runs show
// --json` and `grpo best --json`, with a "hosted" flag added: whether the
// run plays in this daemon now.

// RunListItem is one element of GET /api/v1/runs.
type RunListItem struct {
	checkpoint.RunSummary
	Hosted bool `json:"hosted"`
}

// RunView is GET /api/v1/runs/{id}.
type RunView struct {
	Run    string                `json:"run"`
	State  string                `json:"state"`
	Error  string                `json:"error,omitempty"`
	Hosted bool                  `json:"hosted"`
	Config json.RawMessage       `json:"config"`
	Steps  []StepView            `json:"steps"`
	Best   *checkpoint.Selection `json:"best"`
}

// StepView is one element of GET /api/v1/runs/{id}/steps.
type StepView struct {
	Step       int                    `json:"step"`
	N          int                    `json:"n"`
	Train      *checkpoint.TrainStats `json:"train"`
	Validation *checkpoint.Evaluation `json:"validation"`
	Adapter    *checkpoint.Adapter    `json:"adapter"`
	Job        *checkpoint.Job        `json:"job"`
	Seconds    map[string]float64     `json:"seconds,omitempty"`
}

// BestView is GET /api/v1/runs/{id}/best.
type BestView struct {
	Run string `json:"run"`
	checkpoint.Selection
}

// NewRunView builds the API's (and `grpo runs show --json`'s) view of a run.
func NewRunView(run checkpoint.Run, steps []checkpoint.Step, evals []checkpoint.Evaluation) RunView {
	byStep := make(map[int]checkpoint.Evaluation, len(evals))
	for _, ev := range evals {
		byStep[ev.Step] = ev
	}
	v := RunView{Run: run.Name, State: run.State, Error: run.Error, Config: run.Config, Steps: []StepView{}}
	for _, s := range steps {
		sv := StepView{Step: s.Step, N: s.N, Train: s.Train, Adapter: s.Adapter, Job: s.Job, Seconds: s.Seconds}
		if ev, ok := byStep[s.Step]; ok {
			sv.Validation = &ev
		}
		v.Steps = append(v.Steps, sv)
	}
	if sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals); err == nil {
		v.Best = &sel
	}
	return v
}
