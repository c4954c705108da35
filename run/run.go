// Package run owns a training run's life, for the CLI (`grpo run`) and the
// daemon (`grpo serve`) alike: Open a new run (or Reopen a stored one),
// which names it, opens its Peers (the embedded reference backend, or
// clients of the configured inference endpoints and trainer, or with
// trainer.kind art OpenPipe ART's backend server and the vLLM it starts:
// see art.go) and checks that they answer; Play it; Close it. Nothing else
// builds an orchestrator, and nothing else builds a run's peers: an
// evaluation of its checkpoints opens them here too (OpenPeers).
//
// The run's state in the store is decided by the orchestrator (see its
// package documentation); the one choice left to the caller is
// Options.Interrupted, the state a run is left in when Play's context
// ends: the CLI leaves it cancelled, the daemon running, so that its next
// start resumes it. Cancelling Play's context with cause
// orchestrator.ErrCancelled (a user's request) records cancelled in both.
//
// Events (orchestrator.Event, whose JSON form the orchestrator package
// documents) go to Options.Events as they happen. Among them, and on
// Options.Logger, go the run's warnings (warnings.go): at its start, a
// learning rate the reference backend does not learn with; at the end of
// a run that succeeded, trained adapters that never changed a validation
// episode's outcome. Every run gets them, the CLI's and the daemon's.
package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// Options configure a Run.
type Options struct {
	// Store records the run. Required.
	Store *checkpoint.Store
	// DataDir holds the embedded backend's adapters and jobs; required
	// when the config uses the embedded backend.
	DataDir string
	// Getenv reads the API keys the config names (default os.Getenv).
	Getenv func(string) string
	// Logger receives the run's log lines, each naming the run once
	// ("run" attribute): pass the process's logger, not one that already
	// names the run, or its lines name it twice.
	Logger *slog.Logger
	// Events, when set, receives every event; it must not block for long.
	Events func(orchestrator.Event)
	// OnCall, when set, gives the observer of the LLM calls (action
	// decoded, latency, error) of one split's episodes, "train" or
	// "validation" (see orchestrator.Options.OnCall).
	OnCall func(split string) func(action string, d time.Duration, err error)
	// FleetMetrics, when set, receives the inference endpoints' health,
	// concurrency limits and adapter loads.
	FleetMetrics *inference.FleetMetrics
	// WrapCompleter, when set, wraps the client of the inference endpoints
	// (to count and time requests).
	WrapCompleter func(rollout.Completer) rollout.Completer
	// Interrupted is the state a run is left in when Play's context ends
	// for another cause than orchestrator.ErrCancelled:
	// checkpoint.StateCancelled (the default) or checkpoint.StateRunning.
	Interrupted string
	// OnlyRunning: Play of a reopened run refuses (checkpoint.ErrNotRunning)
	// a run no longer running in the store once it holds its lease (see
	// orchestrator.Options.OnlyRunning).
	OnlyRunning bool
	// RetryEndedJob: a reopened run whose in-flight job the trainer says
	// ended failed or cancelled submits it again under a new id (see
	// orchestrator.Options.RetryEndedJob).
	RetryEndedJob bool
	// Relocate, when set, gives a reopened run the servers and other
	// operational settings of this config (config.Config.Relocated) in
	// place of its stored ones, and stores them with the run: a run whose
	// stack restarted on other addresses resumes there. What the run
	// trains stays the stored config's.
	Relocate *config.Config

	// step is the step of the last step_started event, for the events
	// that come from outside the step loop (the fleet's endpoint_state).
	step *atomic.Int64
}

// Run is one run, opened and ready to play.
type Run struct {
	cfg      config.Config
	opts     Options
	resume   bool
	finished bool // every step was committed when reopened
	peers    *Peers
	once     sync.Once
	err      error
}

// Open prepares a new run of cfg: it names it when cfg.Run.Name is empty
// (see Name), checks the config, and starts and checks the run's peers.
// The run is recorded in the store when it plays. It fails with
// checkpoint.ErrRunExists when the store holds a run of that name.
func Open(ctx context.Context, cfg config.Config, opts Options) (*Run, error) {
	opts, err := opts.check()
	if err != nil {
		return nil, err
	}
	cfg.Run.DB = opts.Store.Path()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Run.Name == "" {
		name, err := Name(ctx, opts.Store, cfg, nil)
		if err != nil {
			return nil, err
		}
		cfg.Run.Name = name
	}
	if _, err := opts.Store.GetRun(ctx, cfg.Run.Name); err == nil {
		return nil, fmt.Errorf("run %s: %w", cfg.Run.Name, checkpoint.ErrRunExists)
	}
	r := &Run{cfg: cfg, opts: opts}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Reopen prepares stored run name to continue from its last committed
// step, with the config it was started with. A run whose every step is
// committed needs no peers: playing it only records it succeeded.
func Reopen(ctx context.Context, name string, opts Options) (*Run, error) {
	opts, err := opts.check()
	if err != nil {
		return nil, err
	}
	rec, err := opts.Store.GetRun(ctx, name)
	if err != nil {
		return nil, err
	}
	cfg, err := config.FromJSON(rec.Config)
	if err != nil {
		return nil, fmt.Errorf("stored config of run %s: %w", name, err)
	}
	cfg.Run.DB = opts.Store.Path()
	// Another process playing the run keeps it: refuse before starting
	// anything (Play refuses too, by the lease, should one start since).
	if l, live, err := opts.Store.GetLease(ctx, name, checkpoint.LeaseOptions{}); err != nil {
		return nil, fmt.Errorf("reopen run %s: %w", name, err)
	} else if live {
		return nil, fmt.Errorf("resume run %s: lease run %s: %w: %s", name, name, checkpoint.ErrLeased, l)
	}
	if opts.Relocate != nil {
		stored, err := config.FromJSON(rec.Config)
		if err != nil {
			return nil, fmt.Errorf("stored config of run %s: %w", name, err)
		}
		moved := stored.Relocated(*opts.Relocate)
		moved.Run.DB = stored.Run.DB
		if !bytes.Equal(moved.JSON(), stored.JSON()) {
			if err := opts.Store.SetRunConfig(ctx, name, moved.JSON()); err != nil {
				return nil, fmt.Errorf("reopen run %s: %w", name, err)
			}
			cfg = moved
			cfg.Run.DB = opts.Store.Path()
		}
	}
	last, ok, err := opts.Store.LastStep(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reopen run %s: %w", name, err)
	}
	r := &Run{cfg: cfg, opts: opts, resume: true, finished: ok && last >= cfg.Run.Steps}
	if r.finished {
		return r, nil
	}
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// check applies the defaults and refuses what cannot work.
func (o Options) check() (Options, error) {
	if o.Store == nil {
		return o, errors.New("run: no store")
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interrupted == "" {
		o.Interrupted = checkpoint.StateCancelled
	}
	if o.Interrupted != checkpoint.StateCancelled && o.Interrupted != checkpoint.StateRunning {
		return o, fmt.Errorf("run: Interrupted %q: want %s or %s", o.Interrupted, checkpoint.StateCancelled, checkpoint.StateRunning)
	}
	if o.Events != nil && o.step == nil {
		events, step := o.Events, new(atomic.Int64)
		o.Events = func(e orchestrator.Event) {
			if e.Type == orchestrator.EventRunStarted || e.Type == orchestrator.EventStepStarted {
				step.Store(int64(e.Step))
			}
			events(e)
		}
		o.step = step
	}
	return o, nil
}

func (r *Run) start(ctx context.Context) error {
	// The peers (the embedded backend, the HTTP client, the fleet, ART)
	// log with the run's name; the orchestrator names the run on its own
	// lines, so it keeps r.opts.Logger.
	p, err := openPeers(ctx, &r.cfg, PeersOptions{
		DataDir: r.opts.DataDir, Getenv: r.opts.Getenv, Logger: r.opts.Logger.With("run", r.cfg.Run.Name),
		Resume: r.resume, FleetMetrics: r.opts.FleetMetrics, OnEndpoint: r.endpointEvents(),
	})
	if err != nil {
		return fmt.Errorf("run %s: %w", r.cfg.Run.Name, err)
	}
	r.peers = p
	return nil
}

// endpointEvents turns the fleet's endpoint changes into endpoint_state
// events of the run's current step; nil without Options.Events.
func (r *Run) endpointEvents() func(inference.EndpointChange) {
	if r.opts.Events == nil {
		return nil
	}
	events, step, name := r.opts.Events, r.opts.step, r.cfg.Run.Name
	return func(c inference.EndpointChange) {
		s := &orchestrator.EndpointState{Endpoint: c.URL, Up: c.Up, ProbeIn: c.ProbeIn.Seconds(), ProbeEvery: c.ProbeEvery.Seconds()}
		if c.Err != nil {
			s.Error = c.Err.Error()
		}
		e := orchestrator.Event{Type: orchestrator.EventEndpointState, Run: name, Time: time.Now(), EndpointState: s}
		if step != nil {
			e.Step = int(step.Load())
		}
		events(e)
	}
}

// dataDir is the embedded backend's directory, absolute, recorded with
// the run (StoredDataDir); empty for other backends.
func (r *Run) dataDir() string {
	if !r.cfg.Embedded() || r.opts.DataDir == "" {
		return ""
	}
	if abs, err := filepath.Abs(r.opts.DataDir); err == nil {
		return abs
	}
	return r.opts.DataDir
}

// Name returns the run's name.
func (r *Run) Name() string { return r.cfg.Run.Name }

// Config returns the run's config; its Run.DB is the store's path.
func (r *Run) Config() config.Config { return r.cfg }

// Finished reports whether the run had committed every step when it was
// reopened: Play then only records it succeeded.
func (r *Run) Finished() bool { return r.finished }

// Play records the run (a new one) or marks it running again (a reopened
// one) and plays its steps until the last is committed, a step fails or
// ctx ends; the store records which (see the package documentation).
// Playing a finished run records it succeeded and returns nil.
func (r *Run) Play(ctx context.Context) error {
	opts := orchestrator.Options{
		Store:       r.opts.Store,
		DataDir:     r.dataDir(),
		Events:      r.observer(ctx),
		OnCall:      r.opts.OnCall,
		Logger:      r.opts.Logger,
		Interrupted: r.opts.Interrupted,
		OnlyRunning: r.opts.OnlyRunning,

		RetryEndedJob: r.opts.RetryEndedJob,
	}
	switch {
	case r.peers != nil:
		opts.Completer, opts.Trainer, opts.Adapters = r.peers.fleet, r.peers.trainer, r.peers.fleet
		if r.peers.art != nil {
			opts.Trainer, opts.Adapters = r.peers.art, artAdapters{}
		}
		if r.opts.WrapCompleter != nil {
			opts.Completer = r.opts.WrapCompleter(opts.Completer)
		}
	case !r.finished:
		return fmt.Errorf("run %s: closed", r.Name())
	}
	o := orchestrator.New(opts)
	if !r.resume {
		return o.Start(ctx, r.cfg)
	}
	err := o.Resume(ctx, r.Name())
	if errors.Is(err, orchestrator.ErrRunFinished) {
		r.finished = true
		return nil
	}
	return err
}

// Close stops the run's peers. Safe to call twice.
func (r *Run) Close() error {
	r.once.Do(func() {
		if r.peers != nil {
			r.err = r.peers.Close()
		}
	})
	return r.err
}

// Name returns the default name of a new run of cfg: dp<n>-<reward>-<k>,
// with the first k the store has not used and taken (when set) does not
// reject (the daemon's runs that are not recorded yet).
func Name(ctx context.Context, store *checkpoint.Store, cfg config.Config, taken func(string) bool) (string, error) {
	prefix := fmt.Sprintf("dp%d-%s", cfg.Env.N, cfg.Reward.Function)
	for {
		name, err := store.UniqueRunName(ctx, prefix)
		if err != nil {
			return "", err
		}
		if taken == nil || !taken(name) {
			return name, nil
		}
		// Free in the store but held: skip it.
		prefix = name
	}
}

// JobEnded reports whether a run failed because its step's trainer job
// ended failed or cancelled (or was cancelled past trainer.job_timeout):
// a resume reattaches that job, so it needs Options.RetryEndedJob to go on.
func JobEnded(err error) bool {
	return errors.Is(err, trainer.ErrJobFailed) || errors.Is(err, trainer.ErrJobCancelled) || errors.Is(err, trainer.ErrJobTimeout)
}
