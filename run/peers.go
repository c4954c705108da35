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
	"sync"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// Peers are what a run, or an evaluation of a run's checkpoints, talks
// to: the inference endpoints, as one fleet that sends chat completions
// and loads adapters (draining a replica that fails), and the trainer. With
// the embedded trainer they are the reference backend started in-process;
// with trainer.kind art, OpenPipe ART's backend server and the vLLM it
// starts (art.go). OpenPeers starts or connects them and checks they
// answer; Close stops what they started.
//
// Every fleet, admin client and trainer client of a run is built here:
// Open and Reopen (a run's peers), `grpo eval --run`, the test split at a
// run's end and `grpo experiment` (OpenPeers with Evaluate), `grpo eval`
// of models on endpoints (OpenEndpoint, OpenBase) and `grpo promote`
// (Admins).
type Peers struct {
	// fleet sends chat completions and loads adapters across the
	// endpoints, draining those that fail.
	fleet   *inference.Fleet
	trainer *trainer.JobClient // nil when evaluating, and with ART
	art     *artTrainer        // with trainer.kind art: ART behind the trainer seam
	// eps are the endpoints as configured (Served asks them).
	eps []Endpoint
	// embedded is the in-process reference backend, nil for remote peers.
	embedded *embeddedBackend
	// tmp is the embedded backend's temporary directory, removed by Close.
	tmp  string
	once sync.Once
	err  error
}

// PeersOptions configure OpenPeers.
type PeersOptions struct {
	// DataDir holds the embedded backend's adapters and jobs; with
	// Evaluate it may be empty: the backend then runs on a temporary
	// directory removed by Close, and loads adapters from their stored
	// paths.
	DataDir string
	// Getenv reads the API keys the config names (default os.Getenv).
	Getenv func(string) string
	// Logger receives the peers' log lines (nil discards them).
	Logger *slog.Logger
	// Evaluate opens the peers for an evaluation of checkpoints: the
	// inference endpoints alone, loading each checkpoint under its own
	// name (never in place), waited for through an outage rather than
	// probed first. No trainer is connected or checked, and trainer.kind
	// art counts as its endpoints.
	Evaluate bool
	// Resume: the run is reopened (ART: its model may be trained).
	Resume bool
	// FleetMetrics, when set, receives the endpoints' health, concurrency
	// limits and adapter loads, labelled with the run.
	FleetMetrics *inference.FleetMetrics
	// OnEndpoint, when set, is told each endpoint drained or readmitted
	// (inference.FleetOptions.OnEndpoint).
	OnEndpoint func(inference.EndpointChange)
	// HTTPClient, when set, is the connection pool of every client;
	// default one sized to inference.concurrency.
	HTTPClient *http.Client
}

func (o PeersOptions) defaults() PeersOptions {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Close stops the fleet's probes and the embedded backend, if any, and
// removes its temporary directory. Safe to call twice.
func (p *Peers) Close() error {
	p.once.Do(func() {
		if p.fleet != nil {
			p.fleet.Close()
		}
		if p.embedded != nil {
			p.err = p.embedded.Close()
		}
		if p.tmp != "" {
			if err := os.RemoveAll(p.tmp); err != nil && p.err == nil {
				p.err = err
			}
		}
	})
	return p.err
}

// Complete sends a chat completion to the endpoints (rollout.Completer).
func (p *Peers) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	return p.fleet.Complete(ctx, req)
}

// LoadEverywhere loads adapter name from path into every live endpoint.
func (p *Peers) LoadEverywhere(ctx context.Context, name, path string) error {
	return p.fleet.LoadEverywhere(ctx, name, path)
}

// UnloadEverywhere unloads adapter name from every live endpoint.
func (p *Peers) UnloadEverywhere(ctx context.Context, name string) error {
	return p.fleet.UnloadEverywhere(ctx, name)
}

// Served is the names some endpoint serves now (GET /v1/models); an
// endpoint that cannot list them counts as serving none.
func (p *Peers) Served(ctx context.Context) map[string]bool {
	return servedModels(ctx, p.eps)
}

var (
	_ rollout.Completer = (*Peers)(nil)
	_ evaluate.Adapters = (*Peers)(nil)
)

// healthTimeout bounds each peer's answer to the health checks.
const healthTimeout = 10 * time.Second

// OpenPeers starts or connects the peers of cfg (see Peers and
// PeersOptions). For a run, it then checks that every peer answers, so
// that a wrong URL or a peer that is down fails now, before any episode
// is played, with a message that names it.
func OpenPeers(ctx context.Context, cfg config.Config, o PeersOptions) (*Peers, error) {
	return openPeers(ctx, &cfg, o)
}

// openPeers is OpenPeers; with ART, a new run's cfg.Inference.Model
// becomes the name ART serves its step-0 checkpoint under.
func openPeers(ctx context.Context, cfg *config.Config, o PeersOptions) (*Peers, error) {
	o = o.defaults()
	if cfg.Trainer.Kind == config.TrainerART && !o.Evaluate {
		return startART(ctx, cfg, o)
	}
	inf := cfg.Inference
	p := &Peers{}
	var trainerURL string
	if cfg.Embedded() {
		dir, err := p.embeddedDir(o)
		if err != nil {
			return nil, err
		}
		e, err := startEmbedded(ctx, embeddedOptionsOf(*cfg, dir, o.Logger))
		if err != nil {
			p.Close()
			return nil, err
		}
		p.embedded = e
		p.eps = []Endpoint{{URL: e.InferenceURL}}
		trainerURL = e.TrainerURL
	} else {
		p.eps = configEndpoints(inf, o.Getenv)
		trainerURL = cfg.Trainer.URL
		for _, w := range unsetKeyVars(*cfg, o.Getenv) {
			o.Logger.Warn(w)
		}
	}
	// One connection pool for the run, sized to its concurrency, and one
	// retry policy for every client of it.
	hc := o.HTTPClient
	if hc == nil {
		hc = httpx.NewHTTPClient(inf.Concurrency, o.Logger)
	}
	p.fleet = newFleet(p.eps, inf, hc, fleetOptions(*cfg, o))
	if o.Evaluate {
		// An endpoint down now is waited for, as through an outage.
		p.fleet.Start(context.WithoutCancel(ctx))
		return p, nil
	}
	var trainerKey string
	if env := cfg.Trainer.APIKeyEnv; env != "" && !cfg.Embedded() {
		trainerKey = o.Getenv(env)
	}
	retry := retryPolicy(inf)
	p.trainer = trainer.NewJobClient(trainerURL, trainer.JobClientOptions{HTTPClient: hc, Retry: &retry, APIKey: trainerKey, PollInterval: 20 * time.Millisecond, MaxPollInterval: 2 * time.Second, SubmitTimeout: time.Duration(cfg.Trainer.JobTimeout), PollOutage: time.Duration(inf.OutageWindow)})
	if err := p.check(ctx, trainerURL); err != nil {
		p.Close()
		return nil, err
	}
	if err := checkModel(*cfg, p.fleet.Models(), o.Logger); err != nil {
		p.Close()
		return nil, err
	}
	// Probes outlive the caller's context only until Close.
	p.fleet.Start(context.WithoutCancel(ctx))
	return p, nil
}

// embeddedDir is the embedded backend's data directory, absolute (adapter
// paths go to the inference server) and created: o.DataDir, or with
// Evaluate and none given a temporary one, removed by Close.
func (p *Peers) embeddedDir(o PeersOptions) (string, error) {
	if o.DataDir == "" {
		if !o.Evaluate {
			return "", errors.New("embedded backend needs a data directory")
		}
		dir, err := os.MkdirTemp("", "grpo-eval-")
		if err != nil {
			return "", fmt.Errorf("embedded backend data directory: %w", err)
		}
		p.tmp = dir
		return dir, nil
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return "", fmt.Errorf("embedded backend data directory: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("embedded backend data directory: %w", err)
	}
	return dir, nil
}

// modelProbeTimeout bounds the first answer of a model's endpoint to
// OpenEndpoint.
const modelProbeTimeout = 30 * time.Second

// OpenEndpoint connects one endpoint serving model, for `grpo eval` of
// models: a fleet of that one endpoint with inf's request settings, as a
// run's (a request that keeps failing is sent again within the retry
// budget, an endpoint that went away is waited for within the outage
// window). The endpoint must answer GET /v1/models first.
func OpenEndpoint(ctx context.Context, ep Endpoint, model string, inf config.Inference, o PeersOptions) (*Peers, error) {
	o = o.defaults()
	p := &Peers{eps: []Endpoint{ep}}
	if err := p.startModel(ctx, model, inf, o); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// OpenBase starts the embedded reference backend's base policy alone, for
// `grpo eval` with no endpoint: seeded seed, of strength coordination
// (trainer.base_coordination), on a temporary directory removed by Close.
// Its model is EmbeddedModel.
func OpenBase(ctx context.Context, seed int64, coordination float64, inf config.Inference, o PeersOptions) (*Peers, error) {
	o = o.defaults()
	o.Evaluate = true
	p := &Peers{}
	dir, err := p.embeddedDir(PeersOptions{Evaluate: true})
	if err != nil {
		return nil, err
	}
	e, err := startEmbedded(ctx, embeddedOptions{DataDir: dir, Seed: seed, BaseCoordination: coordination})
	if err != nil {
		p.Close()
		return nil, err
	}
	p.embedded = e
	p.eps = []Endpoint{{URL: e.InferenceURL}}
	if err := p.startModel(ctx, EmbeddedModel, inf, o); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// startModel builds the fleet of p.eps serving model, probes it and
// starts its probes.
func (p *Peers) startModel(ctx context.Context, model string, inf config.Inference, o PeersOptions) error {
	hc := o.HTTPClient
	if hc == nil {
		hc = httpx.NewHTTPClient(inf.Concurrency, o.Logger)
	}
	p.fleet = newFleet(p.eps, inf, hc, inference.FleetOptions{Model: model, Logger: o.Logger.With("model", model)})
	pctx, cancel := context.WithTimeout(ctx, modelProbeTimeout)
	err := p.fleet.Probe(pctx)
	cancel()
	if err != nil {
		return err
	}
	p.fleet.Start(context.WithoutCancel(ctx))
	return nil
}

// Admins are admin clients of the endpoints to promote a run's adapter
// into: urls, each with the key in the variable keyEnv, when given; else
// the inference endpoints of cfg, with the keys they name
// (configEndpoints). A run on the embedded backend or on ART names none:
// an error matching promote.ErrNoEndpoints says how to serve its adapters.
func Admins(cfg config.Config, getenv func(string) string, urls []string, keyEnv string) ([]*inference.AdminClient, error) {
	var eps []Endpoint
	for _, u := range urls {
		eps = append(eps, Endpoint{URL: u, APIKey: getenv(keyEnv)})
	}
	switch {
	case len(urls) > 0:
	case len(cfg.Inference.Endpoints) == 0 && cfg.Trainer.Kind == config.TrainerART:
		return nil, fmt.Errorf("run %s trained with OpenPipe ART (trainer.kind art), whose own vLLM serves its checkpoints under their ART names (grpo best shows the selected one's): the run names no inference endpoint to load into: %w; to serve it from an endpoint of yours, promote with --endpoint", cfg.Run.Name, promote.ErrNoEndpoints)
	case len(cfg.Inference.Endpoints) == 0:
		return nil, fmt.Errorf("run %s uses the embedded reference backend, whose server lives only in the process playing the run: %w; serve the run's adapters with 'grpo refmodel serve --data-dir <db>.data' (a daemon's run: <data-dir>/<run>) and promote with --endpoint", cfg.Run.Name, promote.ErrNoEndpoints)
	default:
		eps = configEndpoints(cfg.Inference, getenv)
	}
	var clients []*inference.AdminClient
	for _, ep := range eps {
		clients = append(clients, inference.NewAdminClient(ep.URL, inference.AdminOptions{APIKey: ep.APIKey}))
	}
	return clients, nil
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

// servedModels is the names some endpoint serves now (GET /v1/models); an
// endpoint that cannot list them counts as serving none.
func servedModels(ctx context.Context, eps []Endpoint) map[string]bool {
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

// fleetOptions are the fleet settings of cfg's peers: in-place loading
// (not when evaluating: each checkpoint under its own name), metrics
// labelled with the run, o's logger and endpoint observer. NewFleet adds
// the model.
func fleetOptions(cfg config.Config, o PeersOptions) inference.FleetOptions {
	fo := inference.FleetOptions{
		Metrics:    o.FleetMetrics,
		Run:        cfg.Run.Name,
		Logger:     o.Logger,
		OnEndpoint: o.OnEndpoint,
	}
	if cfg.Inference.Adapters.Naming == config.NamingInplace && !o.Evaluate {
		fo.Inplace = cfg.Inference.Adapters.Inplace
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

// configEndpoints are the endpoints of inf with their keys read from the
// environment: api_key_env, OPENAI_API_KEY when it is unset, none for
// config.NoAPIKey.
func configEndpoints(inf config.Inference, getenv func(string) string) []Endpoint {
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

// unsetKeyVars describes the api_key_env settings of cfg (endpoints and
// trainer) that name a variable getenv finds unset or empty: no key is
// then sent, and a server that checks keys answers 401 with nothing
// saying why. OPENAI_API_KEY, used when an endpoint names none, is not
// listed: servers that need no key are the common case.
func unsetKeyVars(cfg config.Config, getenv func(string) string) []string {
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

// retryPolicy is the retry policy of every client of a run or an
// evaluation: inference.retries retries of a transient failure, all
// within inference.retry_budget.
func retryPolicy(inf config.Inference) httpx.Policy {
	retry := httpx.DefaultPolicy()
	retry.Retries = inf.Retries
	retry.Budget = time.Duration(inf.RetryBudget)
	return retry
}

// newFleet builds the fleet of the endpoints eps with the settings of
// inf: a request timeout and the retry policy (retryPolicy) per client,
// the fleet's own resends within the retry budget, the concurrency, the
// outage window (0: fail at once), and the base model a drained replica
// must still serve to be readmitted (inf.Model, unless fo.Model names the
// model). Runs and `grpo eval` build their fleets here, so an evaluation
// rides out faults and outages as a run does. fo carries the caller's
// in-place naming, metrics, run label and logger. hc, when not nil, is the
// connection pool of every client.
func newFleet(eps []Endpoint, inf config.Inference, hc *http.Client, fo inference.FleetOptions) *inference.Fleet {
	retry := retryPolicy(inf)
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
func (p *Peers) check(ctx context.Context, trainerURL string) error {
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
