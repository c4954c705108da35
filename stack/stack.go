// Package stack starts the peers a run talks to: the embedded reference
// backend on loopback ports, or clients of the configured inference
// endpoints and trainer.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/trainer"
)

// Stack is one run's peers.
type Stack struct {
	Completer *inference.Pool
	Fleet     *inference.Fleet
	Trainer   *trainer.JobClient
	// Embedded is the in-process reference backend, nil for remote peers.
	Embedded *Embedded
}

// Close stops the embedded backend, if any. Safe to call twice.
func (s *Stack) Close() error {
	if s.Embedded != nil {
		return s.Embedded.Close()
	}
	return nil
}

// Options for Start.
type Options struct {
	// DataDir holds the embedded backend's adapters and jobs.
	DataDir string
	// Getenv reads API keys named by the config (default os.Getenv).
	Getenv func(string) string
	Logger *slog.Logger
}

// Start connects to the peers of cfg. With the embedded trainer it starts
// the reference backend in-process; otherwise it probes every inference
// endpoint so that a wrong URL fails now, with a message that names it.
func Start(ctx context.Context, cfg config.Config, opts Options) (*Stack, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	inf := cfg.Inference
	// One connection pool for the run, sized to its concurrency.
	hc := httpx.NewHTTPClient(inf.Concurrency)
	retry := httpx.DefaultPolicy()
	retry.Retries = inf.Retries
	chatOpts := func(apiKey string) inference.ChatOptions {
		return inference.ChatOptions{APIKey: apiKey, HTTPClient: hc, RequestTimeout: time.Duration(inf.RequestTimeout), Retry: &retry}
	}
	s := &Stack{Fleet: &inference.Fleet{Inplace: inf.Adapters.Naming == "inplace"}}
	var trainerURL string
	if cfg.Embedded() {
		if opts.DataDir == "" {
			return nil, errors.New("embedded backend needs a data directory")
		}
		// Adapter paths go to the inference server: make them absolute.
		dir, err := filepath.Abs(opts.DataDir)
		if err != nil {
			return nil, fmt.Errorf("embedded backend data directory: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded backend data directory: %w", err)
		}
		e, err := StartEmbedded(ctx, dir, cfg.Run.Seed, opts.Logger)
		if err != nil {
			return nil, err
		}
		s.Embedded = e
		s.Completer = inference.NewPool(inference.NewChatClient(e.InferenceURL, chatOpts("")))
		s.Fleet.Endpoints = []*inference.AdminClient{inference.NewAdminClient(e.InferenceURL, inference.AdminOptions{HTTPClient: hc, Retry: &retry})}
		trainerURL = e.TrainerURL
	} else {
		var clients []*inference.ChatClient
		for _, ep := range inf.Endpoints {
			env := ep.APIKeyEnv
			if env == "" {
				env = "OPENAI_API_KEY"
			}
			key := opts.Getenv(env)
			admin := inference.NewAdminClient(ep.URL, inference.AdminOptions{APIKey: key, HTTPClient: hc, Retry: &retry})
			if err := admin.Probe(ctx); err != nil {
				return nil, fmt.Errorf("inference endpoint: %w", err)
			}
			clients = append(clients, inference.NewChatClient(ep.URL, chatOpts(key)))
			s.Fleet.Endpoints = append(s.Fleet.Endpoints, admin)
		}
		s.Completer = inference.NewPool(clients...)
		trainerURL = cfg.Trainer.URL
	}
	s.Trainer = trainer.NewJobClient(trainerURL, trainer.JobClientOptions{PollInterval: 20 * time.Millisecond, MaxPollInterval: 2 * time.Second})
	return s, nil
}

// EmbeddedModel is the served name of the reference backend's base policy.
const EmbeddedModel = "refmodel"

// Embedded is the reference backend started in-process: its inference
// server and its trainer each on a loopback port, as a real deployment
// has them on two services.
type Embedded struct {
	Backend      *refmodel.Backend
	InferenceURL string // with /v1
	TrainerURL   string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	once   sync.Once
}

// StartEmbedded opens the reference backend on dataDir and serves it on
// two loopback ports until Close.
func StartEmbedded(ctx context.Context, dataDir string, seed int64, logger *slog.Logger) (*Embedded, error) {
	b, err := refmodel.New(refmodel.Options{DataDir: dataDir, Seed: seed, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	if err := b.Open(); err != nil {
		return nil, fmt.Errorf("embedded reference backend: %w", err)
	}
	e := &Embedded{Backend: b}
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

func (e *Embedded) serve(ctx context.Context, h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("embedded reference backend: listen on loopback: %w", err)
	}
	srv := &http.Server{Handler: h}
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

// Close stops both servers and the backend's workers; safe to call twice.
func (e *Embedded) Close() error {
	e.once.Do(func() {
		e.cancel()
		e.wg.Wait()
		if err := e.Backend.Close(); err != nil {
			e.errs = append(e.errs, err)
		}
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}
