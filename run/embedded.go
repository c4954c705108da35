package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/refmodel"
)

// EmbeddedModel is the served name of the reference backend's base policy.
const EmbeddedModel = refmodel.BaseModelName

// ConfigDefaults are what a config running on the embedded reference
// backend uses for the model names and learning rate it leaves unset: pass
// them to config.Parse or config.Load with config.WithEmbedded.
func ConfigDefaults() config.EmbeddedDefaults {
	return config.EmbeddedDefaults{Model: refmodel.BaseModelName, LearningRate: refmodel.DefaultLearningRate}
}

// embeddedBackend is the reference backend started in-process: its inference
// server and its trainer each on a loopback port, as a real deployment
// has them on two services.
type embeddedBackend struct {
	backend      *refmodel.Backend
	InferenceURL string // with /v1
	TrainerURL   string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	once   sync.Once

	// handlers counts the requests being served; closed (under mu) turns
	// new ones away. Close waits for them: http.Server.Close does not,
	// and a request cancelled with its run (a job's create, an adapter's
	// load) went on writing into the data directory after Close returned.
	handlers sync.WaitGroup
	closed   bool
}

// embeddedOptions configure startEmbedded.
type embeddedOptions struct {
	DataDir string // the trainer's adapters and job records
	Seed    int64  // the run's run.seed
	// BaseCoordination is the base policy's strength, the config's
	// trainer.base_coordination: 0 is the default base.
	BaseCoordination float64
	Logger           *slog.Logger // nil discards
}

// embeddedOptionsOf are the options of cfg's embedded backend on dataDir:
// its run.seed and trainer.base_coordination.
func embeddedOptionsOf(cfg config.Config, dataDir string, logger *slog.Logger) embeddedOptions {
	return embeddedOptions{DataDir: dataDir, Seed: cfg.Run.Seed, BaseCoordination: cfg.Trainer.BaseCoordination, Logger: logger}
}

// startEmbedded opens the reference backend as o says and serves it on
// two loopback ports until Close.
func startEmbedded(ctx context.Context, o embeddedOptions) (*embeddedBackend, error) {
	b, err := refmodel.New(refmodel.Options{DataDir: o.DataDir, Seed: o.Seed, BaseCoordination: o.BaseCoordination, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	if err := b.Open(); err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	e := &embeddedBackend{backend: b}
	ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	inf, err := e.serve(ctx, b.InferenceHandler())
	if err != nil {
		e.Close()
		return nil, err
	}
	tr, err := e.serve(ctx, b.TrainerHandler())
	if err != nil {
		e.Close()
		return nil, err
	}
	e.InferenceURL, e.TrainerURL = inf+"/v1", tr
	return e, nil
}

func (e *embeddedBackend) serve(ctx context.Context, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("embedded reference backend: listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: e.counted(h)}
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.mu.Lock()
			e.errs = append(e.errs, err)
			e.mu.Unlock()
		}
	}()
	go func() {
		defer e.wg.Done()
		<-ctx.Done()
		srv.Close()
	}()
	return "http://" + ln.Addr().String(), nil
}

// counted serves h while e is open, counting each request in
// e.handlers; once e closes, it answers 503.
func (e *embeddedBackend) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			http.Error(w, "embedded reference backend closed", http.StatusServiceUnavailable)
			return
		}
		e.handlers.Add(1)
		e.mu.Unlock()
		defer e.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

// Close stops both servers, waits for the requests they were serving
// (closing their connections cancels them), then stops the backend's
// workers; safe to call twice.
func (e *embeddedBackend) Close() error {
	e.once.Do(func() {
		e.cancel()
		e.wg.Wait()
		e.mu.Lock()
		e.closed = true
		e.mu.Unlock()
		e.handlers.Wait()
		if err := e.backend.Close(); err != nil {
			e.errs = append(e.errs, err)
		}
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}
