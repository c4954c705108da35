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
	completer *inference.Pool
	fleet     *inference.Fleet
	trainer   *trainer.JobClient
	// embedded is the in-process reference backend, nil for remote peers.
	embedded *Embedded
}

// close stops the embedded backend, if any. Safe to call twice.
func (p *peers) close() error {
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
	p := &peers{fleet: &inference.Fleet{Inplace: inf.Adapters.Naming == "inplace"}}
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
		e, err := StartEmbedded(ctx, dir, cfg.Run.Seed, opts.Logger)
		if err != nil {
			return nil, err
		}
		p.embedded = e
		p.completer = inference.NewPool(inference.NewChatClient(e.InferenceURL, chatOpts("")))
		p.fleet.Endpoints = []*inference.AdminClient{inference.NewAdminClient(e.InferenceURL, adminOpts(""))}
		trainerURL = e.TrainerURL
	} else {
		var clients []*inference.ChatClient
		for _, ep := range inf.Endpoints {
			env := ep.APIKeyEnv
			if env == "" {
				env = "OPENAI_API_KEY"
			}
			key := ""
			if env != config.NoAPIKey {
				key = getenv(env)
			}
			clients = append(clients, inference.NewChatClient(ep.URL, chatOpts(key)))
			p.fleet.Endpoints = append(p.fleet.Endpoints, inference.NewAdminClient(ep.URL, adminOpts(key)))
		}
		p.completer = inference.NewPool(clients...)
		trainerURL = cfg.Trainer.URL
	}
	p.trainer = trainer.NewJobClient(trainerURL, trainer.JobClientOptions{HTTPClient: hc, Retry: &retry, PollInterval: 20 * time.Millisecond, MaxPollInterval: 2 * time.Second})
	if err := p.check(ctx, trainerURL); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// check asks every inference endpoint for its models (it must be an
// OpenAI-compatible server) and the trainer for GET /healthz.
func (p *peers) check(ctx context.Context, trainerURL string) error {
	for _, admin := range p.fleet.Endpoints {
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := admin.Probe(cctx)
		cancel()
		if err != nil {
			return fmt.Errorf("inference endpoint: %w", err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if err := p.trainer.Health(cctx); err != nil {
		return fmt.Errorf("trainer %s: %w (trainer.url must point at the job API: POST /v1/jobs, GET /healthz)", trainerURL, err)
	}
	return nil
}
