package orchestrator

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/trainer"
)

// Event types, streamed to observers (the daemon's websocket, metrics, the
// CLI's progress display). Each has its own payload type, named like the
// field of Event that carries it.
const (
	EventRunStarted      = "run_started"      // RunStarted
	EventStepStarted     = "step_started"     // StepStarted
	EventEpisodeFinished = "episode_finished" // EpisodeFinished
	EventJobState        = "job_state"        // JobState
	EventAdapterLoaded   = "adapter_loaded"   // AdapterLoaded
	EventValidationDone  = "validation_done"  // ValidationDone
	EventBestChanged     = "best_changed"     // BestChanged
	EventStepCommitted   = "step_committed"   // StepCommitted
	EventRunFinished     = "run_finished"     // RunFinished
	EventEndpointState   = "endpoint_state"   // EndpointState
	EventWarning         = "warning"          // Warning
)

// Event is one thing that happened in a run. Exactly one payload field is
// set: the one Type names (none for a type this version does not know).
// Its JSON form is {"type", "run", "step", "time", "data": payload}; see
// the package documentation and docs/EVENTS.md. json.Unmarshal into an
// Event is the one decoder of that form.
type Event struct {
	Type string    `json:"type"`
	Run  string    `json:"run"`
	Step int       `json:"step"`
	Time time.Time `json:"time"`

	RunStarted      *RunStarted      `json:"-"`
	StepStarted     *StepStarted     `json:"-"`
	EpisodeFinished *EpisodeFinished `json:"-"`
	JobState        *JobState        `json:"-"`
	AdapterLoaded   *AdapterLoaded   `json:"-"`
	ValidationDone  *ValidationDone  `json:"-"`
	BestChanged     *BestChanged     `json:"-"`
	StepCommitted   *StepCommitted   `json:"-"`
	RunFinished     *RunFinished     `json:"-"`
	EndpointState   *EndpointState   `json:"-"`
	Warning         *Warning         `json:"-"`
}

// RunStarted opens a run's event stream.
type RunStarted struct {
	Steps   int  `json:"steps"`
	Resumed bool `json:"resumed"`
	From    int  `json:"from"` // first step this process plays
}

// StepStarted announces a step's work: how many episodes it will play.
type StepStarted struct {
	N          int  `json:"n"`
	Episodes   int  `json:"episodes"` // training episodes (0 when reattaching to a job)
	Validation int  `json:"validation"`
	Reattach   bool `json:"reattach"`
}

// EpisodeFinished reports one episode.
type EpisodeFinished struct {
	Split    string  `json:"split"` // train | validation
	ID       string  `json:"id"`
	N        int     `json:"n"`
	Reward   float64 `json:"reward"`
	Errored  bool    `json:"errored"`
	Deadlock bool    `json:"deadlocked"`
	Meals    int     `json:"meals"`
	Invalid  int     `json:"invalid"`
	Calls    int     `json:"calls"`
	Seconds  float64 `json:"seconds"`
}

// Adapter names a LoRA adapter and the directory that holds it.
type Adapter struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// JobState is a trainer job as last seen: after submission and at every
// change while the orchestrator waits for it.
type JobState struct {
	ID       string      `json:"id"`
	State    string      `json:"state"` // queued | running | succeeded | failed | cancelled
	Progress float64     `json:"progress"`
	Metrics  *JobMetrics `json:"metrics,omitempty"`
	Adapter  *Adapter    `json:"adapter,omitempty"` // set once succeeded
	Error    string      `json:"error,omitempty"`
}

// Terminal reports whether the job has ended.
func (j JobState) Terminal() bool { return trainer.Terminal(j.State) }

// JobMetrics are a trainer job's training metrics. The diagnostics are
// nil when the trainer did not report them (trainer.Metrics).
type JobMetrics struct {
	Loss              float64  `json:"loss"`
	KL                float64  `json:"kl"`
	GradNorm          float64  `json:"grad_norm"`
	ClipFraction      float64  `json:"clip_fraction"`
	OptimizerStep     *float64 `json:"optimizer_step,omitempty"`
	SamplerLogprobGap *float64 `json:"sampler_logprob_gap,omitempty"`
	Entropy           *float64 `json:"entropy,omitempty"`
	UpdateNorm        *float64 `json:"update_norm,omitempty"`
}

// AdapterLoaded reports an adapter hot-loaded into every inference
// endpoint (again, after a restart).
type AdapterLoaded struct {
	Adapter
}

// ValidationDone is the validation of the model a step produced.
type ValidationDone struct {
	Step         int             `json:"step"` // the step validated, as the event's
	Episodes     int             `json:"episodes"`
	Errored      int             `json:"errored"`
	RewardMean   float64         `json:"reward_mean"`
	RewardStd    float64         `json:"reward_std"`
	RewardCI95   [2]float64      `json:"reward_ci95"`
	DeadlockRate float64         `json:"deadlock_rate"`
	MealsMean    float64         `json:"meals_mean"`
	InvalidRate  float64         `json:"invalid_rate"`
	PerN         []ValidationAtN `json:"per_n"`
	Rewards      []float64       `json:"rewards"` // per episode
}

// ValidationAtN is the validation at one table size.
type ValidationAtN struct {
	N            int     `json:"n"`
	Episodes     int     `json:"episodes"`
	RewardMean   float64 `json:"reward_mean"`
	DeadlockRate float64 `json:"deadlock_rate"`
	MealsMean    float64 `json:"meals_mean"`
	InvalidRate  float64 `json:"invalid_rate"`
	// RewardStd is the standard deviation of the rewards at N; omitted
	// for validations stored before it was recorded.
	RewardStd *float64 `json:"reward_std,omitempty"`
}

// BestChanged reports a new selected step (or a new score for it).
type BestChanged struct {
	Policy    string   `json:"policy"`
	Step      int      `json:"step"`
	Value     float64  `json:"value"`
	Scored    bool     `json:"scored"`
	LastStep  int      `json:"last_step"`
	LastValue float64  `json:"last_value"`
	Adapter   *Adapter `json:"adapter"` // nil for the base model
}

// StepCommitted reports a step stored for good.
type StepCommitted struct {
	Step      int                `json:"step"` // as the event's
	N         int                `json:"n"`
	Train     *TrainSummary      `json:"train"`   // nil for step 0
	Adapter   *Adapter           `json:"adapter"` // in use after the step; nil while none is trained
	Job       *checkpoint.Job    `json:"job"`     // nil when no job ran (step 0, or no signal)
	Seconds   map[string]float64 `json:"seconds,omitempty"`
	Committed time.Time          `json:"committed"`
}

// TrainSummary summarises a step's training rollouts.
type TrainSummary struct {
	RewardMean         float64        `json:"reward_mean"`
	RewardStd          float64        `json:"reward_std"`
	Episodes           int            `json:"episodes"`
	Errored            int            `json:"errored"`
	DeadlockRate       float64        `json:"deadlock_rate"`
	MealsMean          float64        `json:"meals_mean"`
	InvalidRate        float64        `json:"invalid_rate"`
	ZeroVarianceGroups int            `json:"zero_variance_groups"`
	FracRewardZeroStd  float64        `json:"frac_reward_zero_std"`
	Trajectories       int            `json:"trajectories"`
	Groups             []GroupSummary `json:"groups"`
	PolicyStep         *int           `json:"policy_step,omitempty"`    // the model that sampled the rollouts was current after this step
	OffPolicyLag       *int           `json:"off_policy_lag,omitempty"` // step-1 - policy_step; 0 when synchronous
	StaleDropped       int            `json:"stale_dropped,omitempty"`  // rollouts dropped as too old
}

// GroupSummary is the rewards of one GRPO group.
type GroupSummary struct {
	ID           string    `json:"id"`
	Seed         int64     `json:"seed"`
	N            int       `json:"n"`
	Rewards      []float64 `json:"rewards"`
	Mean         float64   `json:"mean"`
	Std          float64   `json:"std"`
	ZeroVariance bool      `json:"zero_variance"`
	Resampled    bool      `json:"resampled,omitempty"`
}

// RunFinished closes a run's event stream of this process: State is what
// the store now records (running when the run was interrupted and will be
// resumed, see Options.Interrupted).
type RunFinished struct {
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// EndpointState reports an inference endpoint drained (its requests go to
// the others, or wait for it up to inference.outage_window when none is
// live) or readmitted. The event's step is the run's step then.
type EndpointState struct {
	Endpoint string  `json:"endpoint"`
	Up       bool    `json:"up"`
	Error    string  `json:"error,omitempty"`            // what drained it
	ProbeIn  float64 `json:"probe_in_seconds,omitempty"` // when it is probed again
	// ProbeEvery is how often it is probed after ProbeIn while it does not
	// answer: no event tells those probes.
	ProbeEvery float64 `json:"probe_every_seconds,omitempty"`
}

// Warning says that a run is unlikely to do what its user wants of it,
// and why, in a sentence that names what to check. The run package sends
// it, not the step loop: right after run_started for what the run's
// config shows, right before the run_finished of a run that succeeded
// for what its steps showed. Code tells the warnings apart
// (run.WarnLearningRate, run.WarnValidationUnchanged).
type Warning struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wireEvent is an Event's JSON form.
type wireEvent struct {
	Type string          `json:"type"`
	Run  string          `json:"run"`
	Step int             `json:"step"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data,omitempty"`
}

// payload returns a pointer to the payload field Type names, or nil for an
// unknown type.
func (e *Event) payload() any {
	switch e.Type {
	case EventRunStarted:
		return &e.RunStarted
	case EventStepStarted:
		return &e.StepStarted
	case EventEpisodeFinished:
		return &e.EpisodeFinished
	case EventJobState:
		return &e.JobState
	case EventAdapterLoaded:
		return &e.AdapterLoaded
	case EventValidationDone:
		return &e.ValidationDone
	case EventBestChanged:
		return &e.BestChanged
	case EventStepCommitted:
		return &e.StepCommitted
	case EventRunFinished:
		return &e.RunFinished
	case EventEndpointState:
		return &e.EndpointState
	case EventWarning:
		return &e.Warning
	}
	return nil
}

// MarshalJSON encodes e as {"type","run","step","time","data"}, data being
// the payload Type names (left out when that field is nil).
func (e Event) MarshalJSON() ([]byte, error) {
	w := wireEvent{Type: e.Type, Run: e.Run, Step: e.Step, Time: e.Time}
	if p := e.payload(); p != nil {
		b, err := json.Marshal(p) // a pointer to a pointer: "null" when unset
		if err != nil {
			return nil, fmt.Errorf("encode %s event: %w", e.Type, err)
		}
		if string(b) != "null" {
			w.Data = b
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the JSON form into the payload field Type names.
// The data of an event type this version does not know is skipped, so
// that older readers keep reading newer streams.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Event{Type: w.Type, Run: w.Run, Step: w.Step, Time: w.Time}
	p := e.payload()
	if p == nil || len(w.Data) == 0 {
		return nil
	}
	if err := json.Unmarshal(w.Data, p); err != nil {
		return fmt.Errorf("decode %s event data: %w", w.Type, err)
	}
	return nil
}

// The payloads are built from the store's and the trainer's types here,
// so that a change there shows up in one place.

func adapterOf(a *checkpoint.Adapter) *Adapter {
	if a == nil {
		return nil
	}
	return &Adapter{Name: a.Name, Path: a.Path}
}

func jobState(j trainer.Job) *JobState {
	out := &JobState{ID: j.ID, State: j.State, Progress: j.Progress, Error: j.Error}
	if m := j.Metrics; m != nil {
		out.Metrics = &JobMetrics{Loss: m.Loss, KL: m.KL, GradNorm: m.GradNorm, ClipFraction: m.ClipFraction,
			OptimizerStep: m.OptimizerStep, SamplerLogprobGap: m.SamplerLogprobGap, Entropy: m.Entropy, UpdateNorm: m.UpdateNorm}
	}
	if a := j.Adapter; a != nil {
		out.Adapter = &Adapter{Name: a.Name, Path: a.Path}
	}
	return out
}

func validationDone(ev checkpoint.Evaluation) *ValidationDone {
	out := &ValidationDone{
		Step: ev.Step, Episodes: ev.Episodes, Errored: ev.Errored,
		RewardMean: ev.RewardMean, RewardStd: ev.RewardStd, RewardCI95: ev.RewardCI95,
		DeadlockRate: ev.DeadlockRate, MealsMean: ev.MealsMean, InvalidRate: ev.InvalidRate,
		Rewards: ev.Rewards,
	}
	for _, p := range ev.PerN {
		out.PerN = append(out.PerN, ValidationAtN{N: p.N, Episodes: p.Episodes, RewardMean: p.RewardMean,
			DeadlockRate: p.DeadlockRate, MealsMean: p.MealsMean, InvalidRate: p.InvalidRate, RewardStd: p.RewardStd})
	}
	return out
}

func bestChanged(s checkpoint.Selection) *BestChanged {
	return &BestChanged{Policy: string(s.Policy), Step: s.Step, Value: s.Value, Scored: s.Scored,
		LastStep: s.LastStep, LastValue: s.LastValue, Adapter: adapterOf(s.Adapter)}
}

func stepCommitted(s checkpoint.Step) *StepCommitted {
	out := &StepCommitted{Step: s.Step, N: s.N, Adapter: adapterOf(s.Adapter), Seconds: s.Seconds, Committed: s.Committed}
	if t := s.Train; t != nil {
		out.Train = &TrainSummary{
			RewardMean: t.RewardMean, RewardStd: t.RewardStd, Episodes: t.Episodes, Errored: t.Errored,
			DeadlockRate: t.DeadlockRate, MealsMean: t.MealsMean, InvalidRate: t.InvalidRate,
			ZeroVarianceGroups: t.ZeroVarianceGroups, FracRewardZeroStd: t.FracRewardZeroStd,
			Trajectories: t.Trajectories, PolicyStep: t.PolicyStep, OffPolicyLag: t.OffPolicyLag, StaleDropped: t.StaleDropped,
		}
		for _, g := range t.Groups {
			out.Train.Groups = append(out.Train.Groups, GroupSummary{ID: g.ID, Seed: g.Seed, N: g.N, Rewards: g.Rewards,
				Mean: g.Mean, Std: g.Std, ZeroVariance: g.ZeroVariance, Resampled: g.Resampled})
		}
	}
	if j := s.Job; j != nil {
		job := *j
		out.Job = &job
	}
	return out
}
