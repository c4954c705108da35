package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/run"
)

// Errors of hosting runs, turned into HTTP codes by the API.
var (
	// ErrClosing: the daemon is shutting down and takes no new runs.
	ErrClosing = errors.New("daemon is shutting down")
	// ErrNotHosted: the run exists but is not playing in this daemon.
	ErrNotHosted = errors.New("run is not playing in this daemon")
	// ErrTooManyRuns: as many runs as Options.MaxRuns are playing.
	ErrTooManyRuns = errors.New("too many runs playing")
)

// hosted is a run playing in this process.
type hosted struct {
	name     string
	cancel   context.CancelCauseFunc
	done     chan struct{} // closed when the run's goroutine has finished
	started  chan struct{} // closed at the run's first event
	startOne sync.Once
	err      error // the run's outcome, set before done is closed

	// mu guards down and warnings, which GET /api/v1/runs/{id} serves.
	mu sync.Mutex
	// down is the last endpoint_state event of each of the run's
	// inference endpoints drained now, by URL, so that a page that
	// missed a readmission while its websocket reconnected (or opened
	// during an outage) learns the endpoints down from it.
	down map[string]orchestrator.Event
	// warnings are the run's warning events in this process, in order,
	// so that a page opened after the run started shows them.
	warnings []orchestrator.Event
}

// warning records a warning event of the run.
func (h *hosted) warning(e orchestrator.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.warnings = append(h.warnings, e)
}

// runWarnings returns the run's warning events, oldest first.
func (h *hosted) runWarnings() []orchestrator.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.warnings)
}

// endpointState records an endpoint_state event of the run.
func (h *hosted) endpointState(e orchestrator.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.EndpointState.Up {
		delete(h.down, e.EndpointState.Endpoint)
		return
	}
	if h.down == nil {
		h.down = make(map[string]orchestrator.Event)
	}
	h.down[e.EndpointState.Endpoint] = e
}

// endpointsDown returns the endpoint_state events of the run's endpoints
// drained now, oldest first.
func (h *hosted) endpointsDown() []orchestrator.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]orchestrator.Event, 0, len(h.down))
	for _, e := range h.down {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b orchestrator.Event) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return strings.Compare(a.EndpointState.Endpoint, b.EndpointState.Endpoint)
	})
	return out
}

// launch opens a new run of cfg (named) and plays it in its own goroutine.
func (s *Server) launch(ctx context.Context, cfg config.Config) (*hosted, error) {
	return s.host(ctx, cfg.Run.Name, func(opts run.Options) (*run.Run, error) { return run.Open(ctx, cfg, opts) })
}

// resume reopens stored run name and plays it in its own goroutine. An
// embedded run keeps the data directory its adapters (and trainer jobs)
// are in: one started by grpo run (<db>.data), not only this daemon's
// <data-dir>/<run>, whose trainer would train its job in flight again.
// Without byHand (the daemon's start), only a run still recorded running
// is played; byHand (POST .../resume) plays one that ended too.
func (s *Server) resume(ctx context.Context, name string, byHand *resumeRequest) error {
	_, err := s.host(ctx, name, func(opts run.Options) (*run.Run, error) {
		if dir, ok := run.StoredDataDir(ctx, opts.Store, name); ok {
			opts.DataDir = dir
		}
		if byHand != nil {
			opts.OnlyRunning = false
			opts.RetryEndedJob = byHand.RetryJob
		}
		return run.Reopen(ctx, name, opts)
	})
	return err
}

// host registers run name, opens it and plays it in its own goroutine. It
// returns once the run's record exists in the store (its first event from
// the run loop), or with the error that ended it before that. A run
// interrupted by the daemon's shutdown is left running, so that the next
// start resumes it.
func (s *Server) host(ctx context.Context, name string, open func(run.Options) (*run.Run, error)) (*hosted, error) {
	runCtx, cancel := context.WithCancelCause(s.ctx)
	h := &hosted{name: name, cancel: cancel, done: make(chan struct{}), started: make(chan struct{})}
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return nil, ErrClosing
	case s.runs[name] != nil:
		s.mu.Unlock()
		return nil, fmt.Errorf("run %s: %w", name, checkpoint.ErrRunExists)
	case s.opts.MaxRuns > 0 && len(s.runs) >= s.opts.MaxRuns:
		s.mu.Unlock()
		return nil, fmt.Errorf("run %s: %w: %d of at most %d (a limit of this daemon: grpo serve --max-runs); wait for one to end or cancel one", name, ErrTooManyRuns, len(s.runs), s.opts.MaxRuns)
	}
	s.runs[name] = h
	s.wg.Add(1)
	s.mu.Unlock()

	release := func() {
		cancel(nil)
		s.mu.Lock()
		delete(s.runs, name)
		s.mu.Unlock()
		s.wg.Done()
	}
	r, err := open(run.Options{
		Store:   s.opts.Store,
		DataDir: filepath.Join(s.opts.DataDir, name),
		Getenv:  s.opts.Getenv,
		Logger:  s.logger, // the run names itself on its lines
		Events: func(e orchestrator.Event) {
			// The fleet's endpoint_state can come while the run is
			// opened, before its record exists; every other event
			// comes from the run loop, after it.
			if e.Type != orchestrator.EventEndpointState {
				h.startOne.Do(func() { close(h.started) })
			}
			// Recorded before they are sent: a GET after the event
			// reflects it.
			switch {
			case e.EndpointState != nil:
				h.endpointState(e)
			case e.Warning != nil:
				h.warning(e)
			}
			s.metrics.event(e)
			s.hub.publish(e)
		},
		OnCall:        func(split string) func(string, time.Duration, error) { return s.metrics.onCall(name, split) },
		FleetMetrics:  s.metrics.fleet,
		WrapCompleter: func(c rollout.Completer) rollout.Completer { return s.metrics.completer(name, c) },
		Interrupted:   checkpoint.StateRunning,
		// The daemon resumes runs it found running: not one another
		// process ended since (POST .../resume lifts this: resume).
		OnlyRunning: true,
	})
	if err != nil {
		release()
		return nil, err
	}
	go func() {
		defer release()
		defer close(h.done)
		err := s.play(runCtx, r, name)
		if cerr := r.Close(); cerr != nil {
			s.logger.Warn("close run peers", "run", name, "err", cerr)
		}
		switch {
		case err == nil:
			s.logger.Info("run finished", "run", name)
		case runCtx.Err() != nil && !errors.Is(context.Cause(runCtx), orchestrator.ErrCancelled):
			s.logger.Info("run interrupted by shutdown; it resumes on the next start", "run", name)
			// A clean shutdown is not a failed start.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(runCtx), 10*time.Second)
			if err := s.opts.Store.ResetStarts(rctx, name); err != nil {
				s.logger.Warn("reset the run's failed starts", "run", name, "err", err)
			}
			cancel()
		default:
			s.logger.Warn("run ended", "run", name, "err", err)
		}
		h.err = err
	}()
	select {
	case <-h.started:
		return h, nil
	case <-h.done:
		if h.err == nil {
			return h, nil
		}
		return nil, h.err
	}
}

// play plays r, turning a panic into a failed run: a run that crashes is
// recorded failed rather than left running, so that the next daemon does
// not resume it into the same crash.
func (s *Server) play(ctx context.Context, r *run.Run, name string) (err error) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		err = fmt.Errorf("run %s crashed: %v", name, p)
		s.logger.Error("run crashed; marked failed", "run", name, "panic", p, "stack", string(debug.Stack()))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if serr := s.opts.Store.SetRunState(ctx, name, checkpoint.StateFailed, err.Error()); serr != nil {
			s.logger.Error("mark crashed run failed", "run", name, "err", serr)
		}
	}()
	return r.Play(ctx)
}

// DefaultMaxFailedStarts is Options.MaxFailedStarts's default.
const DefaultMaxFailedStarts = 3

// resumeAll continues every run the store holds as running, but marks
// failed one that was resumed more than MaxFailedStarts times without
// committing a step: each of those starts ended with the daemon dying
// while it played the run.
func (s *Server) resumeAll(ctx context.Context) error {
	list, err := s.opts.Store.ListRuns(ctx)
	if errors.Is(err, checkpoint.ErrNoDatabase) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume runs: %w", err)
	}
	for _, r := range list {
		if r.State != checkpoint.StateRunning {
			continue
		}
		n, err := s.opts.Store.CountStart(ctx, r.Name)
		if err != nil {
			s.logger.Error("resume run", "run", r.Name, "err", err)
			continue
		}
		if max := s.opts.MaxFailedStarts; max > 0 && n > max {
			msg := fmt.Sprintf("not resumed: the daemon resumed this run %d times in a row and died each time before the run committed a step (a crash, out of memory or a kill; see the daemon's log); resume it by hand once the cause is fixed, with POST /api/v1/runs/%s/resume or 'grpo run --resume %s --db %s' (grpo serve --max-failed-starts sets the limit)",
				n-1, url.PathEscape(r.Name), r.Name, s.opts.Store.Path())
			if err := s.opts.Store.SetRunState(ctx, r.Name, checkpoint.StateFailed, msg); err != nil {
				s.logger.Error("mark run failed", "run", r.Name, "err", err)
				continue
			}
			s.logger.Error("run marked failed instead of resumed", "run", r.Name, "starts", n-1)
			continue
		}
		if err := s.resume(ctx, r.Name, nil); errors.Is(err, checkpoint.ErrLeased) {
			s.logger.Warn("run held by another process: resumed here once that process ends or its lease goes stale", "run", r.Name, "err", err)
			s.retryResume(r.Name)
			continue
		} else if err != nil {
			// One broken run must not keep the daemon from hosting the others.
			s.logger.Error("resume run", "run", r.Name, "err", err)
			continue
		}
		s.logger.Info("resumed run", "run", r.Name)
	}
	return nil
}

// retryResume tries again, every Options.ResumeRetry, to resume run name,
// which another process held when this daemon started: until it is
// resumed here, it is no longer running in the store (the other process
// finished or cancelled it), or the daemon closes.
func (s *Server) retryResume(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(s.opts.ResumeRetry)
		defer t.Stop()
		for {
			select {
			case <-s.ctx.Done():
				return
			case <-t.C:
			}
			r, err := s.opts.Store.GetRun(s.ctx, name)
			if err != nil {
				s.logger.Error("resume run", "run", name, "err", err)
				return
			}
			if r.State != checkpoint.StateRunning {
				s.logger.Info("run not resumed: another process ended it", "run", name, "state", r.State)
				return
			}
			// Still held: try again later, without registering the run as
			// hosted here for the attempt.
			if _, live, err := s.opts.Store.GetLease(s.ctx, name, checkpoint.LeaseOptions{}); err == nil && live {
				continue
			}
			switch err := s.resume(s.ctx, name, nil); {
			case errors.Is(err, checkpoint.ErrLeased):
				continue
			case errors.Is(err, checkpoint.ErrNotRunning):
				s.logger.Info("run not resumed: another process ended it", "run", name, "err", err)
				return
			case err != nil:
				if s.ctx.Err() == nil {
					s.logger.Error("resume run", "run", name, "err", err)
				}
				return
			}
			s.logger.Info("resumed run", "run", name)
			return
		}
	}()
}

// cancelRun cancels a hosted run and waits until it has recorded its end.
func (s *Server) cancelRun(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.runs[name]
	s.mu.Unlock()
	if h == nil {
		return ErrNotHosted
	}
	h.cancel(orchestrator.ErrCancelled)
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hostedEvents returns, when run name plays in this process, the
// endpoint_state events of its inference endpoints drained now and its
// warning events.
func (s *Server) hostedEvents(name string) (down, warnings []orchestrator.Event) {
	s.mu.Lock()
	h := s.runs[name]
	s.mu.Unlock()
	if h == nil {
		return nil, nil
	}
	return h.endpointsDown(), h.runWarnings()
}

// hostedRuns returns the names of the runs playing in this process.
func (s *Server) hostedRuns() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]bool, len(s.runs))
	for n := range s.runs {
		out[n] = true
	}
	return out
}
