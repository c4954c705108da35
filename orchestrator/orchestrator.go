// Package orchestrator runs GRPO training: for each step it samples groups
// of episodes, computes group-relative advantages, submits a LoRA update to
// the trainer, waits, hot-loads the adapter into the inference servers,
// validates on held-out seeds, commits the step to the store, and selects
// the best step. A run resumes from its last committed step after a crash,
// never training a committed step twice and never skipping one.
package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// Trainer computes LoRA updates (the job API client, or ART's).
type Trainer interface {
	Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error)
	Wait(ctx context.Context, id string, timeout time.Duration, onUpdate func(trainer.Job)) (trainer.Job, error)
	Cancel(ctx context.Context, id string) error
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
	// OnCall, when set, observes every LLM call (for metrics).
	OnCall func(action string, d time.Duration, err error)
	Logger *slog.Logger
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
	return &Orchestrator{opts: opts, now: time.Now}
}

// ErrRunFinished is returned when resuming a run that has already played
// all its steps.
var ErrRunFinished = errors.New("run already finished all its steps")

// Start records a new run (cfg.Run.Name must be set and new) and plays it.
func (o *Orchestrator) Start(ctx context.Context, cfg config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	sel := cfg.Validation
	err := o.opts.Store.CreateRun(ctx, checkpoint.Run{
		Name: cfg.Run.Name, Config: cfg.JSON(), State: checkpoint.StateRunning,
		Steps: cfg.Run.Steps, Policy: sel.Selection, Metric: sel.Metric, EMA: sel.EMA,
	})
	if err != nil {
		return fmt.Errorf("create run %s: %w", cfg.Run.Name, err)
	}
	return o.play(ctx, cfg, false)
}

// Resume continues run name from its last committed step, with the config
// it was started with.
func (o *Orchestrator) Resume(ctx context.Context, name string) error {
	run, err := o.opts.Store.GetRun(ctx, name)
	if err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	}
	cfg, err := config.FromJSON(run.Config)
	if err != nil {
		return fmt.Errorf("resume run %s: stored config: %w", name, err)
	}
	if last, ok, err := o.opts.Store.LastStep(ctx, name); err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	} else if ok && last >= cfg.Run.Steps {
		return fmt.Errorf("resume run %s: %w (%d of %d, state %s)", name, ErrRunFinished, last, cfg.Run.Steps, run.State)
	}
	if err := o.opts.Store.SetRunState(ctx, name, checkpoint.StateRunning, ""); err != nil {
		return fmt.Errorf("resume run %s: %w", name, err)
	}
	return o.play(ctx, cfg, true)
}

// play runs the step loop and records how the run ended.
func (o *Orchestrator) play(ctx context.Context, cfg config.Config, resumed bool) error {
	r := &run{o: o, cfg: cfg, name: cfg.Run.Name, keeper: inference.AdapterKeeper{Keep: cfg.Inference.Adapters.Keep}}
	err := r.loop(ctx, resumed)
	state, msg := checkpoint.StateSucceeded, ""
	switch {
	case err == nil:
	case ctx.Err() != nil:
		state, msg = checkpoint.StateCancelled, "interrupted: "+err.Error()
	default:
		state, msg = checkpoint.StateFailed, err.Error()
	}
	// The run's context may be cancelled: record the end regardless.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := o.opts.Store.SetRunState(sctx, r.name, state, msg); serr != nil && err == nil {
		err = serr
	}
	r.emit(r.last, EventRunFinished, RunFinished{State: state, Error: msg})
	return err
}

// run is one run's state while it plays.
type run struct {
	o        *Orchestrator
	cfg      config.Config
	name     string
	adapter  *trainer.Adapter // current adapter; nil = base model
	keeper   inference.AdapterKeeper
	promoted int // curriculum promotions so far
	last     int // last committed step
	best     *checkpoint.Selection
	limiter  *rollout.Limiter
}

func (r *run) emit(step int, typ string, data any) {
	if r.o.opts.Events != nil {
		r.o.opts.Events(Event{Type: typ, Run: r.name, Step: step, Time: r.o.now(), Data: data})
	}
}

// model is the served name rollouts use: the current adapter or the base.
func (r *run) model() string {
	if r.adapter == nil {
		return r.cfg.Inference.Model
	}
	return r.servedName(r.adapter.Name)
}

// servedName is the name an adapter is loaded under: its own per step, or
// the run's single name when adapters are replaced in place.
func (r *run) servedName(adapter string) string {
	if r.cfg.Inference.Adapters.Naming == "inplace" {
		return r.name
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
	r.emit(from, EventRunStarted, RunStarted{Steps: r.cfg.Run.Steps, Resumed: resumed, From: from})
	if ok {
		if err := r.restore(ctx); err != nil {
			return err
		}
	} else {
		if err := r.baseStep(ctx); err != nil {
			return err
		}
	}
	for s := max(from, 1); s <= r.cfg.Run.Steps; s++ {
		if err := r.step(ctx, s); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
	}
	return nil
}

// restore rebuilds the run's state from the store after a restart: the
// current adapter (loaded again into the endpoints, which may have
// restarted too), the adapters still tracked, curriculum promotions, and
// the best step.
func (r *run) restore(ctx context.Context) error {
	_, steps, evals, err := r.o.opts.Store.Snapshot(ctx, r.name)
	if err != nil {
		return err
	}
	adapterStep := 0
	for _, s := range steps {
		r.last = s.Step
		if s.Adapter != nil && (r.adapter == nil || s.Adapter.Name != r.adapter.Name) {
			a := trainer.Adapter(*s.Adapter)
			r.adapter, adapterStep = &a, s.Step
			r.keeper.Track(r.servedName(a.Name))
		}
	}
	for _, ev := range evals {
		r.notePromotion(ev)
	}
	if sel, err := r.selectBest(steps, evals); err == nil {
		r.best = &sel
	}
	if r.adapter != nil {
		if err := r.o.opts.Adapters.LoadEverywhere(ctx, r.servedName(r.adapter.Name), r.adapter.Path); err != nil {
			return fmt.Errorf("reload adapter %s: %w", r.adapter.Name, err)
		}
		r.emit(adapterStep, EventAdapterLoaded, *r.adapter)
	}
	return nil
}

// baseStep validates the base model and commits it as step 0.
func (r *run) baseStep(ctx context.Context) error {
	r.emit(0, EventStepStarted, StepStarted{N: r.cfg.TableSize(0, 0), Validation: r.validationEpisodes()})
	t0 := time.Now()
	ev, err := r.validate(ctx, 0)
	if err != nil {
		return fmt.Errorf("validate base model: %w", err)
	}
	step := checkpoint.Step{Step: 0, N: r.cfg.TableSize(0, 0), Seconds: map[string]float64{"validate": time.Since(t0).Seconds()}, Committed: r.o.now()}
	return r.commit(ctx, step, ev)
}

// step plays training step s.
func (r *run) step(ctx context.Context, s int) error {
	store := r.o.opts.Store
	n := r.cfg.TableSize(s, r.promoted)
	step := checkpoint.Step{Step: s, N: n, Seconds: map[string]float64{}}

	inf, err := store.GetInFlight(ctx, r.name)
	if err != nil {
		return err
	}
	var req *trainer.JobRequest
	if inf != nil && inf.Step == s {
		// A job was submitted before a restart: reattach to it rather
		// than sampling (and training) the step again.
		req = new(trainer.JobRequest)
		if err := json.Unmarshal(inf.Request, req); err != nil {
			return fmt.Errorf("decode in-flight job %s: %w", inf.JobID, err)
		}
		step.N, step.Train = inf.N, inf.Train
		r.emit(s, EventStepStarted, StepStarted{N: inf.N, Validation: r.validationEpisodesAt(s), Reattach: true})
	} else {
		r.emit(s, EventStepStarted, StepStarted{N: n, Episodes: r.cfg.GRPO.Groups * r.cfg.GRPO.EpisodesPerGroup, Validation: r.validationEpisodesAt(s)})
		t0 := time.Now()
		batch, err := r.sample(ctx, s, n)
		if err != nil {
			return err
		}
		step.Seconds["rollout"] = time.Since(t0).Seconds()
		step.Train = &batch.stats
		if len(batch.trajectories) > 0 {
			req = r.jobRequest(s, batch.trajectories)
			body, err := json.Marshal(req)
			if err != nil {
				return fmt.Errorf("encode job: %w", err)
			}
			err = store.SetInFlight(ctx, r.name, checkpoint.InFlight{
				Step: s, N: n, JobID: req.ID, OutputAdapter: req.OutputAdapter,
				Request: body, Train: step.Train, Submitted: r.o.now(),
			})
			if err != nil {
				return err
			}
		} else {
			r.o.opts.Logger.Info("no group carries signal; step recorded without a job", "run", r.name, "step", s)
		}
	}

	if req != nil {
		t0 := time.Now()
		job, adapter, err := r.train(ctx, s, *req)
		step.Seconds["train"] = time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		step.Job = job
		t0 = time.Now()
		if err := r.load(ctx, s, adapter); err != nil {
			return err
		}
		step.Seconds["load"] = time.Since(t0).Seconds()
	}
	if r.adapter != nil {
		a := checkpoint.Adapter(*r.adapter)
		step.Adapter = &a
	}

	var ev *checkpoint.Evaluation
	if r.validationDue(s) {
		t0 := time.Now()
		if ev, err = r.validate(ctx, s); err != nil {
			return fmt.Errorf("validate: %w", err)
		}
		step.Seconds["validate"] = time.Since(t0).Seconds()
	}
	step.Committed = r.o.now()
	return r.commit(ctx, step, ev)
}

// commit stores the step (and its evaluation) in one transaction, then
// re-selects the best step and applies curriculum promotion.
func (r *run) commit(ctx context.Context, step checkpoint.Step, ev *checkpoint.Evaluation) error {
	if err := r.o.opts.Store.CommitStep(ctx, r.name, step, ev); err != nil {
		return fmt.Errorf("commit step %d: %w", step.Step, err)
	}
	r.last = step.Step
	r.emit(step.Step, EventStepCommitted, step)
	if ev != nil {
		r.notePromotion(*ev)
	}
	_, steps, evals, err := r.o.opts.Store.Snapshot(ctx, r.name)
	if err != nil {
		return err
	}
	sel, err := r.selectBest(steps, evals)
	if err != nil {
		return nil // nothing selectable yet (e.g. best-train before step 2)
	}
	if r.best == nil || r.best.Step != sel.Step || r.best.Value != sel.Value {
		r.emit(step.Step, EventBestChanged, sel)
	}
	r.best = &sel
	return r.pruneAdapters(ctx)
}

func (r *run) selectBest(steps []checkpoint.Step, evals []checkpoint.Evaluation) (checkpoint.Selection, error) {
	v := r.cfg.Validation
	return checkpoint.Select(v.Selection, v.Metric, v.EMA, steps, evals)
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
