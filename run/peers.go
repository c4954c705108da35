package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/orchestrator"
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
	hc := httpx.NewHTTPClient(inf.Concurrency, opts.Logger)
	retry := RetryPolicy(inf)
	p := &peers{}
	var eps []Endpoint
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
		eps = []Endpoint{{URL: e.InferenceURL}}
		trainerURL = e.TrainerURL
	} else {
		eps = ConfigEndpoints(inf, getenv)
		trainerURL = cfg.Trainer.URL
		for _, w := range UnsetKeyVars(cfg, getenv) {
			opts.Logger.Warn(w)
		}
	}
	p.fleet = NewFleet(eps, inf, hc, fleetOptions(cfg, opts))
	var trainerKey string
	if env := cfg.Trainer.APIKeyEnv; env != "" && !cfg.Embedded() {
		trainerKey = getenv(env)
	}
	p.trainer = trainer.NewJobClient(trainerURL, trainer.JobClientOptions{HTTPClient: hc, Retry: &retry, APIKey: trainerKey, PollInterval: 20 * time.Millisecond, MaxPollInterval: 2 * time.Second, SubmitTimeout: time.Duration(cfg.Trainer.JobTimeout), PollOutage: time.Duration(inf.OutageWindow)})
	if err := p.check(ctx, trainerURL); err != nil {
		p.close()
		return nil, err
	}
	if err := checkModel(cfg, p.fleet.Models(), opts.Logger); err != nil {
		p.close()
		return nil, err
	}
	// Probes outlive the caller's context only until close.
	p.fleet.Start(context.WithoutCancel(ctx))
	return p, nil
}

// checkModel checks that the endpoints list the run's model (GET
// /v1/models, as the fleet's probe read them: listed). The embedded backend answers only the names it lists:
// another is a config error, found before the run is recorded. Other
// servers may answer names they do not list (llama.cpp and TGI take any):
// a warning, since one that checks (vLLM) will refuse every request.
//
// It also warns when trainer.base_model is neither the model's name nor
// the weights an endpoint lists it from (its root): adapters trained on
// one base and loaded onto another answer as neither.
func checkModel(cfg config.Config, listed []inference.Model, logger *slog.Logger) error {
	served := map[string]bool{}
	var roots []string
	for _, m := range listed {
		served[m.ID] = true
		if m.ID == cfg.Inference.Model && (m.Parent == nil || *m.Parent == "") && m.Root != "" && !slices.Contains(roots, m.Root) {
			roots = append(roots, m.Root)
		}
	}
	model := cfg.Inference.Model
	if base := cfg.Trainer.BaseModel; len(roots) > 0 && base != model && !slices.Contains(roots, base) {
		logger.Warn("trainer.base_model is neither inference.model nor the weights the endpoints serve it from: the adapters it trains would be loaded onto another base",
			"base_model", base, "model", model, "served_from", strings.Join(roots, ", "))
	}
	if len(served) == 0 || served[model] {
		return nil
	}
	names := slices.Sorted(maps.Keys(served))
	if cfg.Embedded() {
		return fmt.Errorf("inference.model %q: the embedded reference backend serves %s; leave inference.model unset for it, or name your own endpoints", model, strings.Join(names, ", "))
	}
	logger.Warn("inference.model is not among the models the endpoints list; a server that checks names (vLLM) will refuse every request", "model", model, "listed", strings.Join(names, ", "))
	return nil
}

// ServedModels is the names some endpoint serves now (GET /v1/models); an
// endpoint that cannot list them counts as serving none.
func ServedModels(ctx context.Context, eps []Endpoint) map[string]bool {
	served := map[string]bool{}
	for _, m := range listModels(ctx, eps) {
		served[m.ID] = true
	}
	return served
}

// listModels is what the endpoints list (GET /v1/models), all together;
// an endpoint that cannot list them adds none.
func listModels(ctx context.Context, eps []Endpoint) []inference.Model {
	var clients []*inference.AdminClient
	for _, ep := range eps {
		clients = append(clients, inference.NewAdminClient(ep.URL, inference.AdminOptions{APIKey: ep.APIKey, RequestTimeout: 10 * time.Second}))
	}
	return inference.ListModels(ctx, clients)
}

// fleetOptions are the run's own fleet settings: in-place loading,
// metrics labelled with the run, and opts.Logger (which names the run:
// Run.start). NewFleet adds the model.
func fleetOptions(cfg config.Config, opts Options) inference.FleetOptions {
	fo := inference.FleetOptions{
		Metrics: opts.FleetMetrics,
		Run:     cfg.Run.Name,
		Logger:  opts.Logger,
	}
	if cfg.Inference.Adapters.Naming == config.NamingInplace {
		fo.Inplace = cfg.Inference.Adapters.Inplace
	}
	if opts.Events != nil {
		events, step, name := opts.Events, opts.step, cfg.Run.Name
		fo.OnEndpoint = func(c inference.EndpointChange) {
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
	return fo
}

// Endpoint is one inference endpoint and the API key sent to it.
type Endpoint struct {
	URL    string // base URL with /v1
	APIKey string // "" for none; never logged
	// Request options for servers stricter than vLLM (grpo eval --models):
	// see inference.ChatOptions. Zero for vLLM.
	OmitTokenIDs, OmitLogprobs, MaxCompletionTokens bool
}

// ConfigEndpoints are the endpoints of inf with their keys read from the
// environment: api_key_env, OPENAI_API_KEY when it is unset, none for
// config.NoAPIKey.
func ConfigEndpoints(inf config.Inference, getenv func(string) string) []Endpoint {
	var eps []Endpoint
	for _, ep := range inf.Endpoints {
		env := ep.APIKeyEnv
		if env == "" {
			env = "OPENAI_API_KEY"
		}
		key := ""
		if env != config.NoAPIKey {
			key = getenv(env)
		}
		eps = append(eps, Endpoint{URL: ep.URL, APIKey: key})
	}
	return eps
}

// UnsetKeyVars describes the api_key_env settings of cfg (endpoints and
// trainer) that name a variable getenv finds unset or empty: no key is
// then sent, and a server that checks keys answers 401 with nothing
// saying why. OPENAI_API_KEY, used when an endpoint names none, is not
// listed: servers that need no key are the common case.
func UnsetKeyVars(cfg config.Config, getenv func(string) string) []string {
	if cfg.Embedded() {
		return nil
	}
	var out []string
	unset := func(key, env string) {
		if env != "" && env != config.NoAPIKey && getenv(env) == "" {
			out = append(out, fmt.Sprintf("%s names $%s, which is not set or empty: no API key is sent", key, env))
		}
	}
	for i, ep := range cfg.Inference.Endpoints {
		unset(fmt.Sprintf("inference.endpoints[%d].api_key_env", i), ep.APIKeyEnv)
	}
	unset("trainer.api_key_env", cfg.Trainer.APIKeyEnv)
	return out
}

// RetryPolicy is the retry policy of every client of a run or an
// evaluation: inference.retries retries of a transient failure, all
// within inference.retry_budget.
func RetryPolicy(inf config.Inference) httpx.Policy {
	retry := httpx.DefaultPolicy()
	retry.Retries = inf.Retries
	retry.Budget = time.Duration(inf.RetryBudget)
	return retry
}

// NewFleet builds the fleet of the endpoints eps with the settings of
// inf: a request timeout and the retry policy (RetryPolicy) per client,
// the fleet's own resends within the retry budget, the concurrency, the
// outage window (0: fail at once), and the base model a drained replica
// must still serve to be readmitted (inf.Model, unless fo.Model names the
// model). Runs and `grpo eval` build their fleets here, so an evaluation
// rides out faults and outages as a run does. fo carries the caller's
// in-place naming, metrics, run label and logger. hc, when not nil, is the
// connection pool of every client.
func NewFleet(eps []Endpoint, inf config.Inference, hc *http.Client, fo inference.FleetOptions) *inference.Fleet {
	retry := RetryPolicy(inf)
	var replicas []inference.Replica
	for _, ep := range eps {
		replicas = append(replicas, inference.Replica{
			Chat: inference.NewChatClient(ep.URL, inference.ChatOptions{APIKey: ep.APIKey, HTTPClient: hc, RequestTimeout: time.Duration(inf.RequestTimeout), Retry: &retry,
				OmitTokenIDs: ep.OmitTokenIDs, OmitLogprobs: ep.OmitLogprobs, MaxCompletionTokens: ep.MaxCompletionTokens}),
			Admin: inference.NewAdminClient(ep.URL, inference.AdminOptions{APIKey: ep.APIKey, HTTPClient: hc, Retry: &retry}),
		})
	}
	if fo.Model == "" {
		fo.Model = inf.Model // a replica readmitted must still serve it
	}
	fo.Concurrency = inf.Concurrency
	fo.OutageWindow = time.Duration(inf.OutageWindow)
	if fo.OutageWindow == 0 {
		fo.OutageWindow = -1 // fail at once
	}
	fo.Retry = retry
	return inference.NewFleet(replicas, fo)
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
