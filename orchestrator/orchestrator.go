// Package orchestrator runs GRPO training: for each step it samples groups
// of episodes, computes group-relative advantages, submits a LoRA update to
// the trainer, waits, hot-loads the adapter into the inference servers,
// validates on held-out seeds, commits the step to the store, and selects
// the best step. A run resumes from its last committed step after a crash,
// never training a committed step twice and never skipping one.
//
// # The asynchronous pipeline
//
// With grpo.max_off_policy_steps k > 0, a step's rollouts are sampled
// while earlier steps train, with a model at most k steps older than the
// one the step trains from; submitting, loading and committing stay in
// step order (pipeline.go has the rules). k = 0 is the synchronous loop.
//
// # A run's state
//
// The orchestrator is the one writer of a run's state in the store: Start
// and Resume record it running, and endState decides how it ended:
// succeeded once every step is committed (also when Resume finds them all
// committed already, e.g. after a kill between the last commit and
// recording the end); failed when a step fails; and, when the context
// ends, cancelled if it was cancelled with cause ErrCancelled (a user
// asked), else Options.Interrupted (default cancelled; the daemon says
// running, so that its next start resumes the run).
//
// # Trainers
//
// Options.Trainer is the job API's client or, with trainer.kind art,
// OpenPipe ART behind the same seam (built by the run package). A trainer
// may implement more: ResumableTrainer when it has no idempotency key (its
// state before a job is recorded with the in-flight job and handed back
// after a restart, so that a step is never trained twice),
// CheckpointKeeper when it keeps checkpoints of its own (told after each
// commit to keep the best step's and the last), and ValidationLogger when
// it records validations (handed each validation's trajectories). With
// trainer.kind art the batch keeps the zero-advantage trajectories of the
// groups it trains on, which ART's group statistics count.
//
// # Events
//
// Options.Events receives an Event for everything that happens, in order.
// Each type has its own payload, carried in the Event field named like
// the payload type. The JSON form, streamed by the daemon on /ws and read
// by the dashboard, `grpo watch` and outside tools, is one object per
// event (docs/EVENTS.md lists every field):
//
//	{"type": "job_state", "run": "dp5-shaped-1", "step": 3,
//	 "time": "2026-01-02T15:04:05.123Z", "data": {...}}
//
// with data, by type:
//
//	run_started       RunStarted       {steps, resumed, from}
//	step_started      StepStarted      {n, episodes, validation, reattach}
//	episode_finished  EpisodeFinished  {split, id, n, reward, errored, deadlocked, meals, invalid, calls, seconds}
//	job_state         JobState         {id, state, progress, metrics?: {loss, kl, grad_norm, clip_fraction}, adapter?: {name, path}, error?}
//	adapter_loaded    AdapterLoaded    {name, path}
//	validation_done   ValidationDone   {step, episodes, errored, reward_mean, reward_std, reward_ci95, deadlock_rate, meals_mean, invalid_rate, per_n, rewards}
//	best_changed      BestChanged      {policy, step, value, scored, last_step, last_value, adapter}
//	step_committed    StepCommitted    {step, n, train, adapter, job, seconds?, committed}
//	run_finished      RunFinished      {state, error?}
//	endpoint_state    EndpointState    {endpoint, up, error?, probe_in_seconds?, probe_every_seconds?}
//	warning           Warning          {code, message}
//
// The last two come from outside the step loop: the run package sends
// them (endpoint_state from the run's inference fleet, warning from its
// checks) to the run's observer (run.Options.Events) among these.
//
// Decoding with json.Unmarshal into an Event fills the payload field the
// type names; a type unknown to the reader keeps its envelope and no
// payload.
package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// Trainer computes LoRA updates (the job API client, or ART's). Submit's
// and Wait's errors say what failed and name the job once (the job
// client's: "submit trainer job ID: ...", "wait for trainer job ID: ...",
// "trainer job ID failed: ..."; ART's: "ART job ID: ..."): the
// orchestrator passes them on as they are.
type Trainer interface {
	Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error)
	Wait(ctx context.Context, id string, timeout time.Duration, onUpdate func(trainer.Job)) (trainer.Job, error)
	Cancel(ctx context.Context, id string) error
}

// ResumableTrainer is a Trainer without idempotency keys (OpenPipe ART):
// submitting a request twice would train twice. Before a job is recorded
// in flight, the orchestrator calls Before and records its answer with the
// job; after a restart it hands that answer back through Reattach before
// submitting the request again, so that the trainer can tell whether the
// job already ran (ART: its step has passed the one recorded).
type ResumableTrainer interface {
	Trainer
	Before(ctx context.Context, req trainer.JobRequest) (json.RawMessage, error)
	Reattach(ctx context.Context, req trainer.JobRequest, state json.RawMessage) error
}

// CheckpointKeeper is implemented by a Trainer that keeps the checkpoints
// it trains (ART). After each commit the orchestrator names the adapters
// to keep: the best step's (nil: the base model) and recent, the adapters
// of the last inference.adapters.keep steps (at least the last step's;
// oldest first, none for the base model), so that what selection can pick
// or a user can export stays on the trainer's disk; the trainer may delete
// the others. An error is logged, not fatal.
type CheckpointKeeper interface {
	KeepCheckpoints(ctx context.Context, best *trainer.Adapter, recent []trainer.Adapter) error
}

// ValidationLogger is implemented by a Trainer that records validations
// of its own (ART's /_log, split "val"). After each validation the
// orchestrator hands it the episodes' trajectories, one group per table
// size, with the episode reward and no advantage. An error is logged, not
// fatal.
type ValidationLogger interface {
	LogValidation(ctx context.Context, step int, trajs []trainer.Trajectory) error
}

// Adapters loads and unloads adapters on every inference endpoint.
type Adapters interface {
	LoadEverywhere(ctx context.Context, name, path string) error
	UnloadEverywhere(ctx context.Context, name string) error
}

// Options wire an Orchestrator to its peers.
type Options struct {
	Store     *checkpoint.Store
	Completer rollout.Completer // chat completions, across the endpoints
	Trainer   Trainer
	Adapters  Adapters
	// Events, when set, receives every event; it must not block for long.
	Events func(Event)
	// OnCall, when set, gives the observer of the LLM calls of a run's
	// episodes of one split, "train" or "validation" (as in
	// EpisodeFinished), for metrics. It is asked once per split when a run
	// starts playing; the observer must be cheap and safe for concurrent
	// use (rollout.Runner.OnCall).
	OnCall func(split string) func(action string, d time.Duration, err error)
	Logger *slog.Logger
	// Interrupted is the state recorded for a run whose context ends for
	// another cause than ErrCancelled: checkpoint.StateCancelled (the
	// default) or checkpoint.StateRunning, to be resumed later.
	Interrupted string
	// OnlyRunning makes Resume refuse, with checkpoint.ErrNotRunning and
	// recording nothing, a run whose stored state is no longer running once
	// it holds the lease: a daemon resuming a run it found running must
	// not revive one another process ended meanwhile.
	OnlyRunning bool
	// Lease tunes the lease a run is played under (one process at a time;
	// see checkpoint.AcquireLease); zero fields take the defaults.
	Lease checkpoint.LeaseOptions
	// EndTimeout bounds recording a run's end and releasing its lease,
	// counted from when the step loop stops; default 30 s.
	EndTimeout time.Duration
	// DataDir, recorded with a new run (checkpoint.Run.DataDir), is the
	// embedded backend's directory; empty for other backends.
	DataDir string
	// RetryEndedJob: when Resume reattaches a step's in-flight job and
	// the trainer says it ended failed or cancelled, the step's job is
	// submitted again, once, under the next attempt's id (trainer.RetryID,
	// recorded as the in-flight job first), instead of the run failing
	// the same way again. The job API's trainers only: a trainer without
	// idempotency keys (ResumableTrainer, ART) is not retried.
	RetryEndedJob bool
}

// Orchestrator runs training runs.
type Orchestrator struct {
	opts Options
	now  func() time.Time
}

// New returns an Orchestrator. It does no I/O.
func New(opts Options) *Orchestrator {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.EndTimeout <= 0 {
		opts.EndTimeout = 30 * time.Second
	}
	if opts.Interrupted == "" {
		opts.Interrupted = checkpoint.StateCancelled
	}
	return &Orchestrator{opts: opts, now: time.Now}
}

var (
	// ErrRunFinished is returned when resuming a run that has already
	// played all its steps.
	ErrRunFinished = errors.New("run already finished all its steps")
	// ErrCancelled, as the cause of a run's context (context.WithCancelCause),
	// says that a user cancelled the run: it is recorded cancelled whatever
	// Options.Interrupted says.
	ErrCancelled = errors.New("run cancelled")
)

// Start records a new run (cfg.Run.Name must be set and new) and plays it.
func (o *Orchestrator) Start(ctx context.Context, cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	sel := cfg.Validation
	err := o.opts.Store.CreateRun(ctx, checkpoint.Run{
		Name: cfg.Run.Name, Config: cfg.JSON(), State: checkpoint.StateRunning,
		Steps: cfg.Run.Steps, Policy: sel.Selection, Metric: sel.Metric, EMA: sel.EMA,
		DataDir: o.opts.DataDir,
	})
	if err != nil {
		return err // names the run
	}
	lease, err := o.opts.Store.AcquireLease(ctx, cfg.Run.Name, o.opts.Lease)
	if err != nil {
		return err
	}
	return o.play(ctx, cfg, false, lease)
}

// Resume continues run name from its last committed step, with the config
// it was started with.
func (o *Orchestrator) Resume(ctx context.Context, name string) error {
	// One process plays a run: another one playing it keeps it, and
	// nothing is recorded here.
	lease, err := o.opts.Store.AcquireLease(ctx, name, o.opts.Lease)
	if err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	}
	played := false
	defer func() {
		if !played {
			lease.Release(context.WithoutCancel(ctx))
		}
	}()
	run, err := o.opts.Store.GetRun(ctx, name)
	if err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	}
	if o.opts.OnlyRunning && run.State != checkpoint.StateRunning {
		return fmt.Errorf("resume run %s: %w: it is %s", name, checkpoint.ErrNotRunning, run.State)
	}
	cfg, err := config.FromJSON(run.Config)
	if err != nil {
		return fmt.Errorf("resume run %s: stored config: %w", name, err)
	}
	if last, ok, err := o.opts.Store.LastStep(ctx, name); err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	} else if ok && last >= cfg.Run.Steps {
		// E.g. killed between its last commit and recording its end.
		err := fmt.Errorf("resume run %s: %w (%d of %d steps)", name, ErrRunFinished, last, cfg.Run.Steps)
		if state, msg := o.endState(ctx, err); run.State != state {
			if serr := o.opts.Store.SetRunState(ctx, name, state, msg); serr != nil {
				return fmt.Errorf("resume run %s: %w", name, serr)
			}
		}
		return err
	}
	if err := o.opts.Store.SetRunState(ctx, name, checkpoint.StateRunning, ""); err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	}
	played = true
	return o.play(ctx, cfg, true, lease)
}

// play runs the step loop under lease, records how the run ended and
// releases the lease. A run whose lease is lost (another process took it
// over) stops and records nothing more: the run is the other process's.
func (o *Orchestrator) play(ctx context.Context, cfg config.Config, resumed bool, lease *checkpoint.Lease) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	lease.Keep(stop)
	// The end is recorded and the lease released after the loop, however
	// long it ran and even if ctx was cancelled: their bound starts then.
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.opts.EndTimeout)
		defer cancel()
		lease.Release(rctx)
	}()
	r := &run{o: o, cfg: cfg, name: cfg.Run.Name, keeper: inference.AdapterKeeper{Keep: cfg.Inference.Adapters.Keep}}
	if o.opts.OnCall != nil {
		r.onCall = map[string]func(string, time.Duration, error){}
		for _, split := range []string{"train", "validation"} {
			r.onCall[split] = o.opts.OnCall(split)
		}
	}
	rec, err := o.opts.Store.GetRun(ctx, r.name)
	if err == nil {
		r.jobKey = trainer.JobKey(r.name, rec.ID)
		err = r.loop(ctx, resumed)
	}
	if cause := context.Cause(ctx); errors.Is(cause, checkpoint.ErrLeaseLost) {
		return fmt.Errorf("run %s: %w", r.name, cause)
	}
	state, msg := o.endState(ctx, err)
	// The run's context may be cancelled: record the end regardless.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.opts.EndTimeout)
	defer cancel()
	if serr := o.opts.Store.SetRunState(sctx, r.name, state, msg); serr != nil && err == nil {
		err = serr
	}
	r.emit(Event{Type: EventRunFinished, Step: r.last, RunFinished: &RunFinished{State: state, Error: msg}})
	return err
}

// endState decides the state a run that stopped with err is recorded in,
// and its error message (see the package documentation).
func (o *Orchestrator) endState(ctx context.Context, err error) (state, msg string) {
	switch {
	case err == nil, errors.Is(err, ErrRunFinished):
		return checkpoint.StateSucceeded, ""
	case ctx.Err() == nil:
		return checkpoint.StateFailed, err.Error()
	case errors.Is(context.Cause(ctx), ErrCancelled):
		return checkpoint.StateCancelled, "interrupted: " + err.Error()
	case o.opts.Interrupted == checkpoint.StateRunning:
		return checkpoint.StateRunning, ""
	default:
		return o.opts.Interrupted, "interrupted: " + err.Error()
	}
}

// run is one run's state while it plays.
type run struct {
	o        *Orchestrator
	cfg      config.Config
	name     string
	jobKey   string           // the run part of its job ids (trainer.JobKey)
	adapter  *trainer.Adapter // current adapter; nil = base model
	keeper   inference.AdapterKeeper
	promoted int // curriculum promotions so far
	// promotedAfter[i] is promoted once evals[i] was noted: a step
	// sampled ahead takes its table size from the promotions of the
	// validations before it, whatever has been validated since (see
	// promotionsThrough).
	promotedAfter []int
	last          int // last committed step
	best          *checkpoint.Selection
	limiter       *rollout.Limiter
	// onCall observes the LLM calls of each split's episodes
	// (Options.OnCall); nil without one.
	onCall map[string]func(action string, d time.Duration, err error)
	// steps and evals are the run's curve as the store holds it, in the
	// form selection reads (Step.Head, Evaluation.Head: no train groups,
	// jobs, validation records nor transcripts): read once when the run
	// is resumed, appended on each commit, so that selecting the best
	// step costs no store read (docs/PERFORMANCE.md, the store row).
	steps []checkpoint.Step
	evals []checkpoint.Evaluation

	// mu guards adapter and version, which rollouts sampled ahead read.
	mu      sync.Mutex
	version int // the model in use is the one current after this step
	// past holds, after a restart, the older models the steps sampled
	// next would have used had the run not stopped (pipeline.go).
	past map[int]policy
	pipe *pipeline
	// pending is the trained step validating while the next one trains
	// (overlapValidation); it commits before anything else does.
	pending *pendingStep
	// gapWarned is set once the run has warned of a sampler logprob gap
	// (checkLogprobGap): every later job would repeat it.
	gapWarned atomic.Bool
}

// emit sends e, stamped with the run's name and the time, to the observer.
func (r *run) emit(e Event) {
	if r.o.opts.Events != nil {
		e.Run, e.Time = r.name, r.o.now()
		r.o.opts.Events(e)
	}
}

// model is the served name rollouts use: the current adapter or the base.
func (r *run) model() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.modelLocked()
}

func (r *run) modelLocked() string {
	if r.adapter == nil {
		return r.cfg.Inference.Model
	}
	return r.servedName(r.adapter.Name)
}

// servedName is the name an adapter is loaded under: its own per step, or
// the run's single name when adapters are replaced in place — with the
// run's id, as its per-step names have (trainer.AdapterName of the job
// key), so that two stores' runs of one name never share an adapter on
// an inference server; runs stored without an id keep their name.
func (r *run) servedName(adapter string) string {
	if r.cfg.Inference.Adapters.Naming == "inplace" {
		return strings.ReplaceAll(r.jobKey, "/", ".")
	}
	return adapter
}

func (r *run) loop(ctx context.Context, resumed bool) error {
	store := r.o.opts.Store
	last, ok, err := store.LastStep(ctx, r.name)
	if err != nil {
		return err
	}
	from := 0
	if ok {
		from = last + 1
	}
	r.emit(Event{Type: EventRunStarted, Step: from, RunStarted: &RunStarted{Steps: r.cfg.Run.Steps, Resumed: resumed, From: from}})
	r.limit()
	if ok {
		if err := r.restore(ctx); err != nil {
			return err
		}
	} else {
		if err := r.baseStep(ctx); err != nil {
			return err
		}
	}
	first := max(from, 1)
	inf, err := store.GetInFlight(ctx, r.name)
	if err != nil {
		return err
	}
	next := first
	for inf.For(next) != nil {
		next++ // its rollouts are in the job already
	}
	p := r.newPipeline(ctx, next)
	// A job of a later step, submitted while a step without one validated
	// (the record is that job alone), is reattached too: not sampled.
	for i := inf; i != nil; i = i.Next {
		p.reattach[i.Step] = true
	}
	r.pipe = p
	defer p.stop()
	r.advance(first - 1)
	p.fill()
	for s := first; s <= r.cfg.Run.Steps; s++ {
		if err := r.step(ctx, s, p); err != nil {
			// The step before, validated meanwhile, still commits
			// when it can: its training is not lost.
			if ctx.Err() == nil {
				if serr := r.settle(ctx); serr != nil {
					r.o.opts.Logger.Warn("commit the step validated while the failed one trained", "run", r.name, "err", serr)
				}
			}
			r.abandon()
			return fmt.Errorf("step %d: %w", s, err)
		}
	}
	return r.settle(ctx)
}

// restore rebuilds the run's state from the store after a restart: the
// current adapter (loaded again into the endpoints, which may have
// restarted too), the adapters still tracked, curriculum promotions, and
// the best step.
func (r *run) restore(ctx context.Context) error {
	_, steps, evals, err := r.o.opts.Store.Curve(ctx, r.name)
	if err != nil {
		return err
	}
	r.steps, r.evals = make([]checkpoint.Step, len(steps)), evals
	for i := range steps {
		r.steps[i] = steps[i].Head()
	}
	adapterStep := 0
	after := map[int]*trainer.Adapter{} // the adapter in use after each step
	for _, s := range steps {
		r.last = s.Step
		if s.Adapter != nil && (r.adapter == nil || s.Adapter.Name != r.adapter.Name) {
			a := trainer.Adapter(*s.Adapter)
			r.adapter, adapterStep = &a, s.Step
			r.keeper.Track(r.servedName(a.Name))
		}
		after[s.Step] = r.adapter
	}
	if err := r.restorePast(ctx, after); err != nil {
		return err
	}
	if r.adapter != nil {
		r.keeper.Track(r.servedName(r.adapter.Name))
	}
	for _, ev := range evals {
		r.notePromotion(ev)
		r.promotedAfter = append(r.promotedAfter, r.promoted)
	}
	if sel, err := r.selectBest(); err == nil {
		r.best = &sel
	}
	if r.adapter != nil {
		if err := r.o.opts.Adapters.LoadEverywhere(ctx, r.servedName(r.adapter.Name), r.adapter.Path); err != nil {
			return fmt.Errorf("reload adapter %s: %w", r.adapter.Name, err)
		}
		r.emit(Event{Type: EventAdapterLoaded, Step: adapterStep, AdapterLoaded: &AdapterLoaded{Adapter{Name: r.adapter.Name, Path: r.adapter.Path}}})
	}
	return nil
}

// baseStep validates the base model and commits it as step 0.
func (r *run) baseStep(ctx context.Context) error {
	r.emit(Event{Type: EventStepStarted, Step: 0, StepStarted: &StepStarted{N: r.cfg.TableSize(0, 0), Validation: r.validationEpisodes()}})
	t0 := time.Now()
	ev, err := r.validate(ctx, 0, r.model())
	if err != nil {
		return fmt.Errorf("validate base model: %w", err)
	}
	step := checkpoint.Step{Step: 0, N: r.cfg.TableSize(0, 0), Seconds: map[string]float64{"validate": time.Since(t0).Seconds()}, Committed: r.o.now()}
	return r.commit(ctx, step, ev)
}

// step plays training step s.
func (r *run) step(ctx context.Context, s int, p *pipeline) error {
	store := r.o.opts.Store
	n := r.cfg.TableSize(s, r.promoted)
	step := checkpoint.Step{Step: s, N: n, Seconds: map[string]float64{}}

	all, err := store.GetInFlight(ctx, r.name)
	if err != nil {
		return err
	}
	inf := all.For(s)
	var req *trainer.JobRequest
	if inf != nil {
		// A job was submitted before a restart: reattach to it rather
		// than sampling (and training) the step again.
		req = new(trainer.JobRequest)
		if err := json.Unmarshal(inf.Request, req); err != nil {
			return fmt.Errorf("decode in-flight job %s: %w", inf.JobID, err)
		}
		if rt, ok := r.o.opts.Trainer.(ResumableTrainer); ok {
			if err := rt.Reattach(ctx, *req, inf.TrainerState); err != nil {
				return fmt.Errorf("reattach trainer job %s: %w", inf.JobID, err)
			}
		}
		step.N, step.Train = inf.N, inf.Train
		r.emit(Event{Type: EventStepStarted, Step: s, StepStarted: &StepStarted{N: inf.N, Validation: r.validationEpisodesAt(s), Reattach: true}})
	} else {
		episodes, size := r.cfg.GRPO.Groups*r.cfg.GRPO.EpisodesPerGroup, n
		if f := p.ahead[s]; f != nil {
			// Sampled while earlier steps trained, at the size of the
			// promotions then (pipeline.fill).
			episodes, size = 0, f.n
		}
		r.emit(Event{Type: EventStepStarted, Step: s, StepStarted: &StepStarted{N: size, Episodes: episodes, Validation: r.validationEpisodesAt(s)}})
		t0 := time.Now()
		batch, secs, err := p.take(ctx, s, n)
		if err != nil {
			return err
		}
		step.Seconds["rollout"] = secs
		step.Seconds["rollout_wait"] = time.Since(t0).Seconds()
		n, step.N = batch.n, batch.n
		step.Train = &batch.stats
		if len(batch.trajectories) > 0 {
			req = r.jobRequest(s, batch.trajectories)
			body, err := json.Marshal(req)
			if err != nil {
				return fmt.Errorf("encode job: %w", err)
			}
			var state json.RawMessage
			if rt, ok := r.o.opts.Trainer.(ResumableTrainer); ok {
				if state, err = rt.Before(ctx, *req); err != nil {
					return fmt.Errorf("prepare trainer job %s: %w", req.ID, err)
				}
			}
			err = store.SetInFlight(ctx, r.name, checkpoint.InFlight{
				Step: s, N: n, JobID: req.ID, OutputAdapter: req.OutputAdapter,
				Request: body, Train: step.Train, Submitted: r.o.now(), TrainerState: state,
			})
			if err != nil {
				return err
			}
		} else {
			r.o.opts.Logger.Info("no group carries signal; step recorded without a job", "run", r.name, "step", s)
		}
	}

	var adapter trainer.Adapter
	if req != nil {
		t0 := time.Now()
		job, a, err := r.train(ctx, s, *req)
		if inf != nil && r.o.opts.RetryEndedJob && (errors.Is(err, trainer.ErrJobFailed) || errors.Is(err, trainer.ErrJobCancelled)) {
			// The job reattached after a restart had ended; the user
			// asked for it to be tried again (once: a retry that ends
			// so fails the run).
			if r.retriable() {
				job, a, err = r.retry(ctx, s, *inf, *req, err)
			} else {
				r.o.opts.Logger.Warn("the step's trainer job ended and is not retried: this trainer's jobs have no ids to retry under (ART)", "run", r.name, "step", s)
			}
		}
		step.Seconds["train"] = time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		step.Job, adapter = job, a
	}
	// The step before, trained and loaded, validated meanwhile: it
	// commits first, and before this step's adapter loads (which could
	// unload the adapter it was validated with).
	if err := r.settle(ctx); err != nil {
		return err
	}
	if req != nil {
		t0 := time.Now()
		if err := r.load(ctx, s, adapter); err != nil {
			return err
		}
		step.Seconds["load"] = time.Since(t0).Seconds()
	}
	// The model current after step s is in use: sample ahead what the
	// bound allows while s validates.
	r.advance(s)
	p.fill()
	if r.adapter != nil {
		a := checkpoint.Adapter(*r.adapter)
		step.Adapter = &a
	}

	if !r.validationDue(s) {
		step.Committed = r.o.now()
		return r.commit(ctx, step, nil)
	}
	if r.overlapValidation(s) {
		// Step s+1 trains while s validates; s commits once both are
		// done (settle), so its commit still carries its validation.
		r.pending = r.startValidation(ctx, step, r.model())
		return nil
	}
	v, err := r.playValidation(ctx, s, r.model())
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	r.logValidation(ctx, s, v.episodes)
	step.Seconds["validate"] = v.seconds
	step.Committed = r.o.now()
	return r.commit(ctx, step, v.ev)
}

// pendingStep is a trained step whose validation is being played while
// the next step trains.
type pendingStep struct {
	step   checkpoint.Step
	done   chan struct{} // closed when v and err are set
	v      validated
	err    error
	cancel context.CancelFunc
}

// overlapValidation reports whether step s validates while step s+1
// trains: with an asynchronous pipeline, for every step but the last,
// unless the trainer is ART (whose own vLLM serves validation while it
// trains, and which logs a validation at its current step).
func (r *run) overlapValidation(s int) bool {
	return r.cfg.GRPO.MaxOffPolicySteps > 0 && s < r.cfg.Run.Steps && r.cfg.Trainer.Kind != config.TrainerART
}

// startValidation plays step's validation with model in the background.
func (r *run) startValidation(ctx context.Context, step checkpoint.Step, model string) *pendingStep {
	ctx, cancel := context.WithCancel(ctx)
	p := &pendingStep{step: step, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(p.done)
		p.v, p.err = r.playValidation(ctx, step.Step, model)
	}()
	return p
}

// settle waits for the pending step's validation, if any, and commits
// the step with it.
func (r *run) settle(ctx context.Context) error {
	p := r.pending
	if p == nil {
		return nil
	}
	r.pending = nil
	defer p.cancel()
	<-p.done
	if p.err != nil {
		return fmt.Errorf("step %d: validate: %w", p.step.Step, p.err)
	}
	r.logValidation(ctx, p.step.Step, p.v.episodes)
	p.step.Seconds["validate"] = p.v.seconds
	p.step.Committed = r.o.now()
	return r.commit(ctx, p.step, p.v.ev)
}

// abandon stops a pending step's validation and waits for it: the step
// is not committed, and a resumed run validates it again.
func (r *run) abandon() {
	if p := r.pending; p != nil {
		r.pending = nil
		p.cancel()
		<-p.done
	}
}

// commit stores the step (and its evaluation) in one transaction, then
// re-selects the best step and applies curriculum promotion. Selection
// runs on the curve kept in memory: its cost does not grow with the run.
func (r *run) commit(ctx context.Context, step checkpoint.Step, ev *checkpoint.Evaluation) error {
	if err := r.o.opts.Store.CommitStep(ctx, r.name, step, ev); err != nil {
		return fmt.Errorf("commit step %d: %w", step.Step, err)
	}
	r.last = step.Step
	r.steps = append(r.steps, step.Head())
	if ev != nil {
		r.evals = append(r.evals, ev.Head())
	}
	r.emit(Event{Type: EventStepCommitted, Step: step.Step, StepCommitted: stepCommitted(step)})
	if ev != nil {
		r.notePromotion(*ev)
		r.promotedAfter = append(r.promotedAfter, r.promoted)
	}
	sel, err := r.selectBest()
	if err != nil {
		return nil // nothing selectable yet (e.g. best-train before step 2)
	}
	if r.best == nil || r.best.Step != sel.Step || r.best.Value != sel.Value {
		r.emit(Event{Type: EventBestChanged, Step: step.Step, BestChanged: bestChanged(sel)})
	}
	r.best = &sel
	r.keepCheckpoints(ctx, r.steps)
	return r.pruneAdapters(ctx)
}

// keepCheckpoints tells a trainer that keeps checkpoints (ART) which to
// keep: the best step's and those of the last `keep` steps (at least the
// last one's).
func (r *run) keepCheckpoints(ctx context.Context, steps []checkpoint.Step) {
	k, ok := r.o.opts.Trainer.(CheckpointKeeper)
	if !ok {
		return
	}
	var best *trainer.Adapter
	if r.best != nil && r.best.Adapter != nil {
		a := trainer.Adapter(*r.best.Adapter)
		best = &a
	}
	if err := k.KeepCheckpoints(ctx, best, recentAdapters(steps, r.cfg.Inference.Adapters.Keep)); err != nil {
		// Not fatal: the checkpoints only cost the trainer's disk.
		r.o.opts.Logger.Warn("delete trainer checkpoints", "run", r.name, "err", err)
	}
}

// recentAdapters are the distinct adapters of the last max(keep, 1) steps
// that have one, oldest first. A step without signal keeps the adapter
// of the step before it, which then counts once.
func recentAdapters(steps []checkpoint.Step, keep int) []trainer.Adapter {
	var out []trainer.Adapter
	for i := len(steps) - 1; i >= 0 && len(out) < max(keep, 1); i-- {
		a := steps[i].Adapter
		if a == nil {
			break // the base model, and every step before it
		}
		if len(out) > 0 && out[0].Path == a.Path {
			continue
		}
		out = append([]trainer.Adapter{trainer.Adapter(*a)}, out...)
	}
	return out
}

// selectBest applies the run's selection policy to its curve in memory.
func (r *run) selectBest() (checkpoint.Selection, error) {
	v := r.cfg.Validation
	return checkpoint.Select(v.Selection, v.Metric, v.EMA, r.steps, r.evals)
}

// promotionsThrough is the number of curriculum promotions the
// validations of steps up to s earned.
func (r *run) promotionsThrough(s int) int {
	i := sort.Search(len(r.evals), func(i int) bool { return r.evals[i].Step > s })
	if i == 0 {
		return 0
	}
	return r.promotedAfter[i-1]
}

// notePromotion advances a threshold curriculum when a validation of the
// current stage reaches the threshold: at least it for reward_mean and
// meals_mean, at most it for deadlock_rate.
func (r *run) notePromotion(ev checkpoint.Evaluation) {
	p := r.cfg.Curriculum.Promote
	if len(p.Sizes) == 0 || r.promoted >= len(p.Sizes)-1 {
		return
	}
	m := r.cfg.Validation.Metric
	reached := m.Of(ev) >= p.Threshold
	if m.Minimized() {
		reached = m.Of(ev) <= p.Threshold
	}
	if reached {
		r.promoted++
	}
}
