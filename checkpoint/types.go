package checkpoint

import (
	"encoding/json"
	"time"
)

// Run states.
const (
	StateRunning   = "running"
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// States lists the accepted run states.
var States = []string{StateRunning, StateSucceeded, StateFailed, StateCancelled}

// Run is a run's record. Its JSON field names are printed by
// `grpo runs show --json` and are a public interface.
type Run struct {
	Name string `json:"name"`
	// ID is random, drawn when the run is created (CreateRun) and kept
	// when it resumes: no other store can produce it, so the run's trainer
	// job ids, which include it, never meet another run's of the same
	// name. Runs stored before ids existed have none.
	ID      string          `json:"id,omitempty"`
	Config  json.RawMessage `json:"config"` // the resolved config, as JSON
	State   string          `json:"state"`  // running | succeeded | failed | cancelled
	Steps   int             `json:"steps"`  // planned number of training steps
	Policy  Policy          `json:"policy"` // selection policy: best-validation | best-train | last
	Metric  Metric          `json:"metric"` // validation metric, e.g. reward_mean
	EMA     float64         `json:"ema"`
	Error   string          `json:"error,omitempty"`
	Created time.Time       `json:"created"`
	Updated time.Time       `json:"updated"`
	// DataDir is the directory of the embedded backend's adapters and
	// trainer jobs the run was started with (absolute), so that a resume
	// finds them wherever it runs; empty for runs on other backends and
	// runs stored before it was recorded.
	DataDir string `json:"data_dir,omitempty"`
}

// RunSummary is one line of ListRuns: a run's state and results, kept up
// to date at every commit. Its JSON field names are printed by `grpo runs
// --json` and served by GET /api/v1/runs: a public interface.
type RunSummary struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	Steps    int    `json:"steps"`     // last committed step number, 0 if only the base model
	BestStep int    `json:"best_step"` // by the run's policy, -1 if unknown
	// BestValue is the best step's score (Selection.Value: the metric,
	// smoothed for the best-* policies); null when it has none (policy
	// last on a step not validated).
	BestValue *float64 `json:"best_value"`
	// BestDeadlockRate is the deadlock rate of the best step's validation;
	// null when that step was not validated.
	BestDeadlockRate *float64 `json:"best_deadlock_rate"`
	// Metric is what BestValue measures (the run's validation.metric).
	Metric  Metric    `json:"metric"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// GroupStats are the rewards of one GRPO group.
type GroupStats struct {
	ID           string    `json:"id"`
	Seed         int64     `json:"seed"`
	N            int       `json:"n"`
	Rewards      []float64 `json:"rewards"`
	Mean         float64   `json:"mean"`
	Std          float64   `json:"std"`
	ZeroVariance bool      `json:"zero_variance"`
	Resampled    bool      `json:"resampled,omitempty"`
}

// TrainStats summarise the training rollouts of one step.
type TrainStats struct {
	RewardMean         float64      `json:"reward_mean"`
	RewardStd          float64      `json:"reward_std"`
	Episodes           int          `json:"episodes"`
	Errored            int          `json:"errored"`
	DeadlockRate       float64      `json:"deadlock_rate"`
	MealsMean          float64      `json:"meals_mean"`
	InvalidRate        float64      `json:"invalid_rate"`
	ZeroVarianceGroups int          `json:"zero_variance_groups"`
	FracRewardZeroStd  float64      `json:"frac_reward_zero_std"`
	Trajectories       int          `json:"trajectories"`
	Groups             []GroupStats `json:"groups"`
	// PolicyStep is the step after which the model that sampled these
	// rollouts was current (its adapter is that step's, or an earlier
	// one's when that step trained nothing); OffPolicyLag is how many
	// steps older it is than the model the step trains from (step-1 -
	// PolicyStep): 0 when synchronous, at most grpo.max_off_policy_steps.
	// Both are nil in steps stored before they were recorded.
	PolicyStep   *int `json:"policy_step,omitempty"`
	OffPolicyLag *int `json:"off_policy_lag,omitempty"`
	// StaleDropped counts rollouts sampled for this step and dropped
	// because their model had become older than the bound allows.
	StaleDropped int `json:"stale_dropped,omitempty"`
}

// Job is the trainer job of one step as it finished.
type Job struct {
	ID        string             `json:"id"`
	State     string             `json:"state"`
	Metrics   map[string]float64 `json:"metrics"`
	Error     string             `json:"error,omitempty"`
	Submitted time.Time          `json:"submitted"`
	Finished  time.Time          `json:"finished"`
}

// Adapter names a LoRA adapter and the directory that holds it, as the
// trainer reported it.
type Adapter struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Step is a committed training step. Step 0 is the base model.
type Step struct {
	Step      int                `json:"step"`
	N         int                `json:"n"`                 // table size of this step's training rollouts (curriculum)
	Train     *TrainStats        `json:"train"`             // nil for step 0
	Adapter   *Adapter           `json:"adapter"`           // adapter in use after this step; nil while none is trained
	Job       *Job               `json:"job"`               // nil when no job ran (step 0, or a step with no signal)
	Seconds   map[string]float64 `json:"seconds,omitempty"` // timings: rollout, train, load, validate
	Committed time.Time          `json:"committed"`
}

// EvalN is the validation result at one table size.
type EvalN struct {
	N            int     `json:"n"`
	Episodes     int     `json:"episodes"`
	RewardMean   float64 `json:"reward_mean"`
	DeadlockRate float64 `json:"deadlock_rate"`
	MealsMean    float64 `json:"meals_mean"`
	InvalidRate  float64 `json:"invalid_rate,omitempty"`
	// RewardStd is the standard deviation of the rewards at N; nil in
	// evaluations stored before it was recorded.
	RewardStd *float64 `json:"reward_std,omitempty"`
}

// Evaluation is the validation of the checkpoint a step produced.
type Evaluation struct {
	Step         int        `json:"step"`
	Episodes     int        `json:"episodes"`
	Errored      int        `json:"errored"`
	RewardMean   float64    `json:"reward_mean"`
	RewardStd    float64    `json:"reward_std"`
	RewardCI95   [2]float64 `json:"reward_ci95"`
	DeadlockRate float64    `json:"deadlock_rate"`
	MealsMean    float64    `json:"meals_mean"`
	InvalidRate  float64    `json:"invalid_rate"`
	PerN         []EvalN    `json:"per_n"`
	Rewards      []float64  `json:"rewards"` // per-episode rewards, for significance tests between steps
	// Records is every episode as measured, in play order (table size,
	// then table), so that every figure above can be recomputed and
	// checkpoints compared table by table. Absent in stores written
	// before it existed.
	Records []EpisodeRecord `json:"records,omitempty"`
	// Transcripts are round-by-round replays of the first
	// validation.transcripts episodes at each table size; absent when
	// none were asked for. Run views leave them out (they are served per
	// step: GET /api/v1/runs/{id}/steps/{step}/transcripts).
	Transcripts []EpisodeReplay `json:"transcripts,omitempty"`
}

// EpisodeReplay is one validation episode round by round.
type EpisodeReplay struct {
	ID       string        `json:"id"`
	N        int           `json:"n"`
	Seed     int64         `json:"seed"` // the table seed
	Reward   float64       `json:"reward"`
	Meals    int           `json:"meals"`
	Deadlock bool          `json:"deadlock"`
	Errored  bool          `json:"errored,omitempty"`
	Rounds   []ReplayRound `json:"rounds"`
}

// ReplayRound is one round: each philosopher's move in seat order.
type ReplayRound struct {
	Round int          `json:"round"`
	Moves []ReplayMove `json:"moves"`
}

// ReplayMove is a philosopher's turn: its tool call ("invalid" when none
// could be read), whether it succeeded, the forks it holds after the
// round, and its raw output (capped).
type ReplayMove struct {
	Action string `json:"action"`
	OK     bool   `json:"ok"`
	Forks  []int  `json:"forks"`
	Output string `json:"output"`
}

// EpisodeRecord is what one held-out episode measured.
type EpisodeRecord struct {
	N        int         `json:"n"`
	Seed     int64       `json:"seed"` // the table seed
	Reward   float64     `json:"reward"`
	Terms    RewardTerms `json:"terms"`
	Meals    int         `json:"meals"` // total meals
	Deadlock bool        `json:"deadlock"`
	Invalid  int         `json:"invalid_outputs"`
	Calls    int         `json:"llm_calls"`
	Errored  bool        `json:"errored,omitempty"`
}

// RewardTerms are an episode's reward terms (DESIGN §3), named as in
// rollout's episode JSON.
type RewardTerms struct {
	NoDeadlock float64 `json:"r_nd"`
	Throughput float64 `json:"r_thru"`
	Unfairness float64 `json:"r_fair"`
	Idle       float64 `json:"r_idle"`
}

// InFlight is a trainer job submitted for a step that is not yet committed.
// A restarted orchestrator finds it and waits for the same job instead of
// training the step again. Request is the job request as sent to the
// trainer; the store keeps it opaque.
type InFlight struct {
	Step          int             `json:"step"`
	N             int             `json:"n"`
	JobID         string          `json:"job_id"`
	OutputAdapter string          `json:"output_adapter"`
	Request       json.RawMessage `json:"request"`
	Train         *TrainStats     `json:"train"`
	Submitted     time.Time       `json:"submitted"`
	// TrainerState is what a trainer without idempotency keys recorded
	// before the job was submitted, to tell after a restart whether it ran
	// (ART: its step before training); empty for the job API.
	TrainerState json.RawMessage `json:"trainer_state,omitempty"`
	// Next is the job of the following step, submitted while this one's
	// validation was still being played (an asynchronous pipeline
	// validates step s while step s+1 trains); it becomes the record when
	// this step commits.
	Next *InFlight `json:"next,omitempty"`
}

// For returns the record of step s: r itself, or the next step's job
// nested in it; nil when neither is of step s.
func (r *InFlight) For(s int) *InFlight {
	switch {
	case r == nil:
		return nil
	case r.Step == s:
		return r
	case r.Next != nil && r.Next.Step == s:
		return r.Next
	}
	return nil
}
