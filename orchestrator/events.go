package orchestrator

import "time"

// Event types, streamed to observers (the daemon's websocket, metrics, the
// CLI's progress display).
const (
	EventRunStarted      = "run_started"
	EventStepStarted     = "step_started"
	EventEpisodeFinished = "episode_finished"
	EventJobState        = "job_state"
	EventAdapterLoaded   = "adapter_loaded"
	EventValidationDone  = "validation_done"
	EventBestChanged     = "best_changed"
	EventStepCommitted   = "step_committed"
	EventRunFinished     = "run_finished"
)

// Event is one thing that happened in a run. Data depends on Type:
//   - run_started: RunStarted
//   - step_started: StepStarted
//   - episode_finished: EpisodeFinished
//   - job_state: trainer.Job
//   - adapter_loaded: trainer.Adapter
//   - validation_done: checkpoint.Evaluation
//   - best_changed: checkpoint.Selection
//   - step_committed: checkpoint.Step
//   - run_finished: RunFinished
type Event struct {
	Type string    `json:"type"`
	Run  string    `json:"run"`
	Step int       `json:"step"`
	Time time.Time `json:"time"`
	Data any       `json:"data,omitempty"`
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

// RunFinished closes a run's event stream.
type RunFinished struct {
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}
