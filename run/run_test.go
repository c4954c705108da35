package run_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/run"
)

func mustConfig(tb testing.TB, yaml string) config.Config {
	tb.Helper()
	cfg, err := config.Parse([]byte(yaml), config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// small is a run that plays in a second or two on the embedded backend.
const small = "run: {name: r, steps: 2, seed: 3}\nvalidation: {episodes: 4}\n"

// options are a store and data directory in a fresh temporary directory.
func options(tb testing.TB) run.Options {
	dir := tb.TempDir()
	return run.Options{Store: checkpoint.New(filepath.Join(dir, "grpo.db"), checkpoint.Options{}), DataDir: filepath.Join(dir, "data")}
}

func state(tb testing.TB, s *checkpoint.Store, name string) checkpoint.Run {
	tb.Helper()
	r, err := s.GetRun(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// MustOpen opens cfg and closes it at cleanup.
func MustOpen(tb testing.TB, cfg config.Config, opts run.Options) *run.Run {
	tb.Helper()
	r, err := run.Open(context.Background(), cfg, opts)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

func TestPlayAndReopenFinished(t *testing.T) {
	ctx := context.Background()
	opts := options(t)
	var mu sync.Mutex
	var events []orchestrator.Event
	opts.Events = func(e orchestrator.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	r := MustOpen(t, mustConfig(t, small), opts)
	if err := r.Play(ctx); err != nil {
		t.Fatalf("Play: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got, want := state(t, opts.Store, "r").State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
	if last := events[len(events)-1]; last.RunFinished == nil || last.RunFinished.State != checkpoint.StateSucceeded {
		t.Fatalf("last event %+v, want run_finished succeeded", last)
	}
	if _, err := run.Open(ctx, mustConfig(t, small), opts); !errors.Is(err, checkpoint.ErrRunExists) {
		t.Fatalf("Open of an existing name: %v, want ErrRunExists", err)
	}

	// Killed between its last commit and recording its end: the store
	// says running (or anything else), every step is committed.
	for _, st := range []string{checkpoint.StateSucceeded, checkpoint.StateRunning, checkpoint.StateCancelled} {
		if err := opts.Store.SetRunState(ctx, "r", st, ""); err != nil {
			t.Fatal(err)
		}
		events = nil
		r2, err := run.Reopen(ctx, "r", opts)
		if err != nil {
			t.Fatalf("Reopen finished run (%s): %v", st, err)
		}
		if !r2.Finished() {
			t.Fatalf("Reopen (%s): Finished()=false", st)
		}
		if err := r2.Play(ctx); err != nil {
			t.Fatalf("Play finished run (%s): %v, want nil", st, err)
		}
		r2.Close()
		if got, want := state(t, opts.Store, "r").State, checkpoint.StateSucceeded; got != want {
			t.Fatalf("state after replaying a finished run (was %s)=%s, want %s", st, got, want)
		}
		if len(events) != 0 {
			t.Fatalf("a finished run emitted %d events", len(events))
		}
	}
	if _, err := run.Reopen(ctx, "nope", opts); !errors.Is(err, checkpoint.ErrRunNotFound) {
		t.Fatalf("Reopen unknown run: %v, want ErrRunNotFound", err)
	}
}

// TestInterruptedState checks the one rule both callers share: a run whose
// context ends is left in Options.Interrupted, unless the cause is a
// user's cancel; and it resumes from there.
func TestInterruptedState(t *testing.T) {
	for _, c := range []struct {
		name        string
		interrupted string
		cause       error
		want        string
	}{
		{"cli interrupt", "", nil, checkpoint.StateCancelled},
		{"daemon shutdown", checkpoint.StateRunning, nil, checkpoint.StateRunning},
		{"cli user cancel", checkpoint.StateCancelled, orchestrator.ErrCancelled, checkpoint.StateCancelled},
		{"daemon user cancel", checkpoint.StateRunning, orchestrator.ErrCancelled, checkpoint.StateCancelled},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := options(t)
			opts.Interrupted = c.interrupted
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var finished *orchestrator.RunFinished
			opts.Events = func(e orchestrator.Event) {
				if e.Type == orchestrator.EventStepStarted && e.Step == 1 {
					cancel(c.cause)
				}
				if e.RunFinished != nil {
					finished = e.RunFinished
				}
			}
			r := MustOpen(t, mustConfig(t, small), opts)
			if err := r.Play(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Play: %v, want context.Canceled", err)
			}
			r.Close()
			if got := state(t, opts.Store, "r").State; got != c.want {
				t.Fatalf("state=%s, want %s", got, c.want)
			}
			if finished == nil || finished.State != c.want {
				t.Fatalf("run_finished %+v, want state %s", finished, c.want)
			}
			opts.Events = nil
			r2, err := run.Reopen(context.Background(), "r", opts)
			if err != nil {
				t.Fatalf("Reopen: %v", err)
			}
			defer r2.Close()
			if r2.Finished() {
				t.Fatal("an interrupted run reopened as finished")
			}
			if err := r2.Play(context.Background()); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if got := state(t, opts.Store, "r").State; got != checkpoint.StateSucceeded {
				t.Fatalf("state after resume=%s", got)
			}
		})
	}
}

func TestName(t *testing.T) {
	ctx := context.Background()
	opts := options(t)
	cfg := mustConfig(t, "run: {steps: 1}\nvalidation: {episodes: 4}\nenv: {n: 6}\nreward: {function: paper}\n")
	name, err := run.Name(ctx, opts.Store, cfg, nil)
	if got, want := name, "dp6-paper-1"; err != nil || got != want {
		t.Fatalf("Name()=%q, %v; want %q", got, err, want)
	}
	r := MustOpen(t, cfg, opts)
	if got, want := r.Name(), "dp6-paper-1"; got != want {
		t.Fatalf("Open named the run %q, want %q", got, want)
	}
	if err := r.Play(ctx); err != nil {
		t.Fatal(err)
	}
	name, err = run.Name(ctx, opts.Store, cfg, nil)
	if got, want := name, "dp6-paper-2"; err != nil || got != want {
		t.Fatalf("Name() after a run=%q, %v; want %q", got, err, want)
	}
	taken := func(n string) bool { return n == "dp6-paper-2" }
	if name, err = run.Name(ctx, opts.Store, cfg, taken); err != nil || name == "dp6-paper-2" || name == "dp6-paper-1" {
		t.Fatalf("Name() with dp6-paper-2 taken=%q, %v", name, err)
	}
}

func TestOpenChecksPeers(t *testing.T) {
	models := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
			return
		}
		http.NotFound(w, r)
	})
	inf := httptest.NewServer(models)
	defer inf.Close()
	down := httptest.NewServer(models)
	down.Close()
	noHealth := httptest.NewServer(http.NotFoundHandler())
	defer noHealth.Close()

	for _, c := range []struct {
		name, inference, trainer string
		want                     []string
	}{
		{"inference down", down.URL + "/v1", noHealth.URL, []string{"inference endpoint", down.URL + "/v1"}},
		{"trainer without /healthz", inf.URL + "/v1", noHealth.URL, []string{"trainer " + noHealth.URL, "/healthz", "404"}},
		{"trainer down", inf.URL + "/v1", down.URL, []string{"trainer " + down.URL, "/healthz"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustConfig(t, "run: {name: p, steps: 1}\ntrainer: {kind: jobs, url: '"+c.trainer+"'}\ninference:\n  endpoints: [{url: '"+c.inference+"'}]\n")
			opts := options(t)
			_, err := run.Open(context.Background(), cfg, opts)
			if err == nil {
				t.Fatal("Open succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Open: %v; want a message naming %q", err, w)
				}
			}
			if _, err := opts.Store.GetRun(context.Background(), "p"); !errors.Is(err, checkpoint.ErrRunNotFound) {
				t.Fatalf("a run whose peers do not answer was recorded: %v", err)
			}
		})
	}
}
