package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/stack"
)

// Errors of hosting runs, turned into HTTP codes by the API.
var (
	// ErrClosing: the daemon is shutting down and takes no new runs.
	ErrClosing = errors.New("daemon is shutting down")
	// ErrNotHosted: the run exists but is not playing in this daemon.
	ErrNotHosted = errors.New("run is not playing in this daemon")
)

// hosted is a run playing in this process.
type hosted struct {
	name     string
	cancel   context.CancelFunc
	done     chan struct{} // closed when the run's goroutine has finished
	byUser   atomic.Bool   // cancelled through the API, not by shutdown
	started  chan struct{} // closed at the run's first event
	startOne sync.Once
	err      error // the run's outcome, set before done is closed
}

// launch starts (or, with resume, continues) the run cfg names in its own
// goroutine and returns once the run's record exists in the store (its
// first event), or with the error that ended it before that.
func (s *Server) launch(ctx context.Context, cfg config.Config, resume bool) (*hosted, error) {
	name := cfg.Run.Name
	runCtx, cancel := context.WithCancel(s.ctx)
	h := &hosted{name: name, cancel: cancel, done: make(chan struct{}), started: make(chan struct{})}
	s.mu.Lock()
	switch {
	case s.closing:
		s.mu.Unlock()
		return nil, ErrClosing
	case s.runs[name] != nil:
		s.mu.Unlock()
		return nil, fmt.Errorf("run %s: %w", name, checkpoint.ErrRunExists)
	}
	s.runs[name] = h
	s.wg.Add(1)
	s.mu.Unlock()

	release := func() {
		cancel()
		s.mu.Lock()
		delete(s.runs, name)
		s.mu.Unlock()
		s.wg.Done()
	}
	st, err := stack.Start(ctx, cfg, stack.Options{DataDir: filepath.Join(s.opts.DataDir, name), Getenv: s.opts.Getenv, Logger: s.logger})
	if err != nil {
		release()
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	o := orchestrator.New(orchestrator.Options{
		Store:     s.opts.Store,
		Completer: s.metrics.completer(name, st.Completer),
		Trainer:   st.Trainer,
		Adapters:  st.Fleet,
		Events: func(e orchestrator.Event) {
			h.startOne.Do(func() { close(h.started) })
			s.metrics.event(e)
			s.hub.publish(e)
		},
		OnCall: s.metrics.onCall(name),
		Logger: s.logger.With("run", name),
	})
	go func() {
		defer release()
		defer close(h.done)
		var err error
		if resume {
			err = o.Resume(runCtx, name)
		} else {
			err = o.Start(runCtx, cfg)
		}
		if cerr := st.Close(); cerr != nil {
			s.logger.Warn("close run peers", "run", name, "err", cerr)
		}
		h.err = s.settle(name, runCtx, h, err)
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

// settle records how a run's goroutine ended where the orchestrator could
// not: a run interrupted by shutdown goes back to running so that the next
// daemon resumes it, and a run that had already played every step is
// marked succeeded.
func (s *Server) settle(name string, runCtx context.Context, h *hosted, err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case err == nil:
		s.logger.Info("run finished", "run", name)
	case errors.Is(err, orchestrator.ErrRunFinished):
		if serr := s.opts.Store.SetRunState(ctx, name, checkpoint.StateSucceeded, ""); serr != nil {
			return errors.Join(err, serr)
		}
		return nil
	case runCtx.Err() != nil && !h.byUser.Load():
		s.logger.Info("run interrupted by shutdown; it resumes on the next start", "run", name)
		if serr := s.opts.Store.SetRunState(ctx, name, checkpoint.StateRunning, ""); serr != nil {
			s.logger.Error("mark interrupted run resumable", "run", name, "err", serr)
			return errors.Join(err, serr)
		}
	default:
		s.logger.Warn("run ended", "run", name, "err", err)
	}
	return err
}

// resumeAll continues every run the store holds as running.
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
		if err := s.resume(ctx, r.Name); err != nil {
			// One broken run must not keep the daemon from hosting the others.
			s.logger.Error("resume run", "run", r.Name, "err", err)
			continue
		}
		s.logger.Info("resumed run", "run", r.Name)
	}
	return nil
}

func (s *Server) resume(ctx context.Context, name string) error {
	run, err := s.opts.Store.GetRun(ctx, name)
	if err != nil {
		return err
	}
	cfg, err := config.FromJSON(run.Config)
	if err != nil {
		return fmt.Errorf("stored config of run %s: %w", name, err)
	}
	_, err = s.launch(ctx, cfg, true)
	return err
}

// cancelRun cancels a hosted run and waits until it has recorded its end.
func (s *Server) cancelRun(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.runs[name]
	s.mu.Unlock()
	if h == nil {
		return ErrNotHosted
	}
	h.byUser.Store(true)
	h.cancel()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
