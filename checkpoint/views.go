package checkpoint

import (
	"context"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"
)

// RunView is a run as `grpo runs show --json` prints it and the daemon
// serves it (GET /api/v1/runs/{id}). Its JSON field names are a public
// interface.
type RunView struct {
	Run    string `json:"run"`
	State  string `json:"state"`
	Error  string `json:"error,omitempty"`
	Hosted bool   `json:"hosted"` // set by the daemon: the run plays in it now
	// DataDir is the embedded backend's directory of the run's adapters
	// and jobs (Run.DataDir): what `grpo refmodel serve --data-dir`
	// serves them from. Absent for other backends and older stores.
	DataDir string          `json:"data_dir,omitempty"`
	Config  json.RawMessage `json:"config"`
	Steps   []StepView      `json:"steps"`
	Best    *Selection      `json:"best"`
	// Tests are the checkpoints measured on the test split (grpo eval
	// --run, the end-of-run summary, grpo experiment), in step order:
	// {"split":"test","seed":S,"evaluation":{"step":..,"episodes":..,
	// "reward_mean":..,"per_n":[..],"records":[..],...}}, the evaluation
	// in the same form as a step's validation. Absent when none is stored.
	Tests []TestEvaluation `json:"tests,omitempty"`
	// InFlight and Validating are what a running run has under way past
	// its last committed step, as the store records it (the in-flight
	// record; set by SetUnderway, for grpo runs show and the daemon's
	// GET /api/v1/runs/{id} alike). InFlight is the trainer job of the
	// newest step not committed: still training, or trained and its step
	// being validated (the store does not say which). Validating is a
	// step known to be validated, not committed yet: with the
	// asynchronous pipeline, the step before the one whose job trains.
	// Absent when there is none, and for runs not running.
	InFlight   *InFlightView `json:"in_flight,omitempty"`
	Validating *int          `json:"validating,omitempty"`
	// Lease is the run's lease: the process that plays it, or played it
	// last without releasing it (Live false: its holder is gone or its
	// heartbeat is stale). Absent when no process holds the run.
	Lease *LeaseView `json:"lease,omitempty"`
}

// InFlightView is a trainer job submitted for a step not yet committed.
type InFlightView struct {
	Step      int       `json:"step"`
	N         int       `json:"n"`
	JobID     string    `json:"job_id"`
	Submitted time.Time `json:"submitted"`
}

// LeaseView is a run's lease as RunView shows it.
type LeaseView struct {
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Live: the holder is presumed to play the run (its heartbeat is
	// fresh, and on this host its pid runs).
	Live bool `json:"live"`
}

// Underway is what a RunView's InFlight, Validating and Lease are made of:
// a run's in-flight record (nil when there is none) and its lease (nil when
// no process holds the run), Live saying whether its holder is presumed
// to play the run.
type Underway struct {
	InFlight *InFlight
	Lease    *LeaseInfo
	Live     bool
}

// GetUnderway reads run name's in-flight record and lease in one
// transaction (as GetInFlight and GetLease would, the lease's liveness by
// the default LeaseOptions), for RunView.SetUnderway. Read it before the
// steps: a step committed in between then shows as committed, not as
// under way.
func (s *Store) GetUnderway(ctx context.Context, name string) (Underway, error) {
	var u Underway
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		if u.InFlight, err = getInFlight(b, name); err != nil {
			return err
		}
		u.Lease, err = getLease(b, name)
		return err
	})
	if err != nil {
		return Underway{}, runNotFound(name, err)
	}
	if u.Lease != nil {
		u.Live = LeaseOptions{}.live(*u.Lease)
	}
	return u, nil
}

// SetUnderway sets v's InFlight and Validating from the run's in-flight
// record and Lease from its lease, as GetUnderway read them before the
// steps v was made from.
func (v *RunView) SetUnderway(u Underway) {
	if l := u.Lease; l != nil {
		v.Lease = &LeaseView{PID: l.PID, Host: l.Host, Started: l.Started, Heartbeat: l.Heartbeat, Live: u.Live}
	}
	if v.State != StateRunning {
		return
	}
	inf := u.InFlight
	last := -1
	if len(v.Steps) > 0 {
		last = v.Steps[len(v.Steps)-1].Step
	}
	if inf != nil && inf.Step <= last {
		inf = inf.Next // the record's step committed since it was read
	}
	if inf == nil || inf.Step <= last {
		return
	}
	job := inf
	switch {
	case inf.Next != nil && inf.Next.Step > inf.Step:
		// The next step's job was submitted while inf's step validated.
		job = inf.Next
		v.Validating = &inf.Step
	case inf.Step == last+2:
		// A step without a job (no signal) validates while the next
		// one trains.
		s := last + 1
		v.Validating = &s
	}
	v.InFlight = &InFlightView{Step: job.Step, N: job.N, JobID: job.JobID, Submitted: job.Submitted}
}

// StepView is one step of a RunView: the step and its validation.
type StepView struct {
	Step       int                `json:"step"`
	N          int                `json:"n"`
	Train      *TrainStats        `json:"train"`
	Validation *Evaluation        `json:"validation"`
	Adapter    *Adapter           `json:"adapter"`
	Job        *Job               `json:"job"`
	Seconds    map[string]float64 `json:"seconds,omitempty"`
	// ValidationTerms is the mean of each reward term over the step's
	// validation episodes (errored ones left out, as in every other
	// validation figure); absent when the store kept no episode records.
	ValidationTerms *RewardTerms `json:"validation_terms,omitempty"`
	// Transcripts is how many episode replays the step's validation kept
	// (GET /api/v1/runs/{id}/steps/{step}/transcripts serves them).
	Transcripts int `json:"transcripts,omitempty"`
	// AdapterOnDisk, when set, says whether the adapter directory was
	// found on the reader's machine (set by grpo runs show).
	AdapterOnDisk *bool `json:"adapter_on_disk,omitempty"`
}

// BestView is a run's selected step, as `grpo best --json` prints it and
// GET /api/v1/runs/{id}/best serves it.
type BestView struct {
	Run string `json:"run"`
	Selection
}

// NewRunView builds the view of a run from its record, steps and
// evaluations; Best is chosen by the run's own policy.
func NewRunView(run Run, steps []Step, evals []Evaluation) RunView {
	byStep := make(map[int]Evaluation, len(evals))
	for _, ev := range evals {
		byStep[ev.Step] = ev
	}
	v := RunView{Run: run.Name, State: run.State, Error: run.Error, DataDir: run.DataDir, Config: run.Config, Steps: []StepView{}}
	for _, s := range steps {
		sv := StepView{Step: s.Step, N: s.N, Train: s.Train, Adapter: s.Adapter, Job: s.Job, Seconds: s.Seconds}
		if ev, ok := byStep[s.Step]; ok {
			sv.Transcripts = len(ev.Transcripts)
			ev.Transcripts = nil // served per step
			sv.Validation = &ev
			sv.ValidationTerms = TermMeans(ev.Records)
		}
		v.Steps = append(v.Steps, sv)
	}
	if sel, err := Select(run.Policy, run.Metric, run.EMA, steps, evals); err == nil {
		v.Best = &sel
	}
	return v
}

// TermMeans is the mean of each reward term over the records that did not
// error; nil when none is left.
func TermMeans(records []EpisodeRecord) *RewardTerms {
	var sum RewardTerms
	k := 0
	for _, r := range records {
		if r.Errored {
			continue
		}
		sum.NoDeadlock += r.Terms.NoDeadlock
		sum.Throughput += r.Terms.Throughput
		sum.Unfairness += r.Terms.Unfairness
		sum.Idle += r.Terms.Idle
		k++
	}
	if k == 0 {
		return nil
	}
	n := float64(k)
	return &RewardTerms{NoDeadlock: sum.NoDeadlock / n, Throughput: sum.Throughput / n, Unfairness: sum.Unfairness / n, Idle: sum.Idle / n}
}
