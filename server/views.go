package server

import (
	"encoding/json"

	"github.com/grpo-dev/grpo/checkpoint"
)

// The API's JSON shapes are those of `grpo runs --json`, `grpo runs show
// --json` and `grpo best --json`, with a "hosted" flag added: whether the
// run plays in this daemon now.

// runListItem is one element of GET /api/v1/runs.
type runListItem struct {
	checkpoint.RunSummary
	Hosted bool `json:"hosted"`
}

// runView is GET /api/v1/runs/{id}.
type runView struct {
	Run    string                `json:"run"`
	State  string                `json:"state"`
	Error  string                `json:"error,omitempty"`
	Hosted bool                  `json:"hosted"`
	Config json.RawMessage       `json:"config"`
	Steps  []stepView            `json:"steps"`
	Best   *checkpoint.Selection `json:"best"`
}

// stepView is one element of GET /api/v1/runs/{id}/steps.
type stepView struct {
	Step       int                 `json:"step"`
	N          int                 `json:"n"`
	Train      *trainView          `json:"train"`
	Validation *validationView     `json:"validation"`
	Adapter    *checkpoint.Adapter `json:"adapter"`
	Job        *checkpoint.Job     `json:"job"`
	Seconds    map[string]float64  `json:"seconds,omitempty"`
}

type trainView struct {
	RewardMean         float64                 `json:"reward_mean"`
	RewardStd          float64                 `json:"reward_std"`
	Episodes           int                     `json:"episodes"`
	Errored            int                     `json:"errored"`
	DeadlockRate       float64                 `json:"deadlock_rate"`
	MealsMean          float64                 `json:"meals_mean"`
	ZeroVarianceGroups int                     `json:"zero_variance_groups"`
	Trajectories       int                     `json:"trajectories"`
	Groups             []checkpoint.GroupStats `json:"groups"`
}

type validationView struct {
	RewardMean   float64            `json:"reward_mean"`
	RewardStd    float64            `json:"reward_std"`
	RewardCI95   [2]float64         `json:"reward_ci95"`
	DeadlockRate float64            `json:"deadlock_rate"`
	MealsMean    float64            `json:"meals_mean"`
	InvalidRate  float64            `json:"invalid_rate"`
	Episodes     int                `json:"episodes"`
	Errored      int                `json:"errored"`
	PerN         []checkpoint.EvalN `json:"per_n"`
}

// bestView is GET /api/v1/runs/{id}/best.
type bestView struct {
	Run string `json:"run"`
	checkpoint.Selection
}

func newRunView(run checkpoint.Run, steps []checkpoint.Step, evals []checkpoint.Evaluation) runView {
	byStep := make(map[int]checkpoint.Evaluation, len(evals))
	for _, ev := range evals {
		byStep[ev.Step] = ev
	}
	v := runView{Run: run.Name, State: run.State, Error: run.Error, Config: run.Config, Steps: []stepView{}}
	for _, s := range steps {
		sv := stepView{Step: s.Step, N: s.N, Adapter: s.Adapter, Job: s.Job, Seconds: s.Seconds}
		if t := s.Train; t != nil {
			sv.Train = &trainView{RewardMean: t.RewardMean, RewardStd: t.RewardStd, Episodes: t.Episodes, Errored: t.Errored,
				DeadlockRate: t.DeadlockRate, MealsMean: t.MealsMean, ZeroVarianceGroups: t.ZeroVarianceGroups,
				Trajectories: t.Trajectories, Groups: t.Groups}
		}
		if ev, ok := byStep[s.Step]; ok {
			sv.Validation = &validationView{RewardMean: ev.RewardMean, RewardStd: ev.RewardStd, RewardCI95: ev.RewardCI95,
				DeadlockRate: ev.DeadlockRate, MealsMean: ev.MealsMean, InvalidRate: ev.InvalidRate,
				Episodes: ev.Episodes, Errored: ev.Errored, PerN: ev.PerN}
		}
		v.Steps = append(v.Steps, sv)
	}
	if sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals); err == nil {
		v.Best = &sel
	}
	return v
}
