package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/trainer"
)

// peers are one run's inference endpoints and trainer.
type peers struct {
	// fleet sends chat completions and loads adapters across the
	// endpoints, draining those that fail.
	fleet   *inference.Fleet
	trainer *trainer.JobClient
	// embedded is the in-process reference backend, nil for remote peers.
	embedded *Embedded
}

// close stops the fleet's probes and the embedded backend, if any. Safe
// to call twice.
func (p *peers) close() error {
	if p.fleet != nil {
		p.fleet.Close()
	}
	if p.embedded != nil {
		return p.embedded.Close()
	}
	return nil
}

// healthTimeout bounds each peer's answer to the health checks.
const healthTimeout = 10 * time.Second

// startPeers connects to the peers of cfg: with the embedded trainer it
// starts the reference backend in-process on dataDir. Then it checks that
// every peer answers, so that a wrong URL or a peer that is down fails now,
// before any episode is played, with a message that names it.
func startPeers(ctx context.Context, cfg config.Config, opts Options) (*peers, error) {
	dataDir, getenv := opts.DataDir, opts.Getenv
	inf := cfg.Inference
	// One connection pool for the run, sized to its concurrency, and one
	// retry policy for every client of it.
	hc := httpx.NewHTTPClient(inf.Concurrency)
	retry := httpx.DefaultPolicy()
	retry.Retries = inf.Retries
	retry.Budget = time.Duration(inf.RetryBudget)
	chatOpts := func(apiKey string) inference.ChatOptions {
		return inference.ChatOptions{APIKey: apiKey, HTTPClient: hc, RequestTimeout: time.Duration(inf.RequestTimeout), Retry: &retry}
	}
	adminOpts := func(apiKey string) inference.AdminOptions {
		return inference.AdminOptions{APIKey: apiKey, HTTPClient: hc, Retry: &retry}
	}
	p := &peers{}
	var replicas []inference.Replica
	var trainerURL string
	if cfg.Embedded() {
		if dataDir == "" {
			return nil, errors.New("embedded backend needs a data directory")
		}
		// Adapter paths go to the inference server: make them absolute.
		dir, err := filepath.Abs(dataDir)
		if err != nil {
			return nil, fmt.Errorf("embedded backend data directory: %w", err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded backend data directory: %w", err)
		}
		e, err := StartEmbeddedWith(ctx, EmbeddedOptionsOf(cfg, dir, opts.Logger))
		if err != nil {
			return nil, err
		}
		p.embedded = e
		replicas = []inference.Replica{{
			Chat: inference.NewChatClient(e.InferenceURL, chatOpts("")), Admin: inference.NewAdminClient(e.InferenceURL, adminOpts("")),
		}}
		trainerURL = e.TrainerURL
	} else {
		for _, ep := range inf.Endpoints {
			env := ep.APIKeyEnv
			if env == "" {
				env = "OPENAI_API_KEY"
			}
			key := ""
			if env != config.NoAPIKey {
				key = getenv(env)
			}
			replicas = append(replicas, inference.Replica{
				Chat: inference.NewChatClient(ep.URL, chatOpts(key)), Admin: inference.NewAdminClient(ep.URL, adminOpts(key)),
			})
		}
		trainerURL = cfg.Trainer.URL
	}
	p.fleet = inference.NewFleet(replicas, fleetOptions(cfg, opts))
	p.trainer = trainer.NewJobClient(trainerURL, trainer.JobClientOptions{HTTPClient: hc, Retry: &retry, PollInterval: 20 * time.Millisecond, MaxPollInterval: 2 * time.Second, SubmitTimeout: time.Duration(cfg.Trainer.JobTimeout)})
	if err := p.check(ctx, trainerURL); err != nil {
		p.close()
		return nil, err
	}
	// Probes outlive the caller's context only until close.
	p.fleet.Start(context.WithoutCancel(ctx))
	return p, nil
}

// fleetOptions are the fleet's settings from the config: in-place loading,
// the run's concurrency, the outage window.
func fleetOptions(cfg config.Config, opts Options) inference.FleetOptions {
	inf := cfg.Inference
	fo := inference.FleetOptions{
		Concurrency:  inf.Concurrency,
		OutageWindow: time.Duration(inf.OutageWindow),
		Metrics:      opts.FleetMetrics,
		Run:          cfg.Run.Name,
		Logger:       opts.Logger.With("run", cfg.Run.Name),
	}
	if fo.OutageWindow == 0 {
		fo.OutageWindow = -1 // fail at once
	}
	if inf.Adapters.Naming == config.NamingInplace {
		fo.Inplace = inf.Adapters.Inplace
	}
	return fo
}

// check asks every inference endpoint for its models (it must be an
// OpenAI-compatible server; with several, one that cannot be reached is
// drained and the run starts on the others) and the trainer for GET
// /healthz.
func (p *peers) check(ctx context.Context, trainerURL string) error {
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	err := p.fleet.Probe(cctx)
	cancel()
	if err != nil {
		return fmt.Errorf("inference endpoint: %w", err)
	}
	cctx, cancel = context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if err := p.trainer.Health(cctx); err != nil {
		return fmt.Errorf("trainer %s: %w (trainer.url must point at the job API: POST /v1/jobs, GET /healthz)", trainerURL, err)
	}
	return nil
}
