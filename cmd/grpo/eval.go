package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/run"
)

const evalSynopsis = `Usage: grpo eval [flags]

Evaluates one or more models on the Dining Philosophers table and prints, per
model and table size n: mean reward with its 95% CI, deadlock rate, mean
meals, invalid-output rate, starved philosophers, Jain's fairness, and
errored episodes (server failures after retries; never scored).

Models are served by any OpenAI-compatible server (vLLM, an API vendor):
  grpo eval --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen3-14B
  grpo eval --models models.yaml        # [{name, url, api_key_env}, ...]
A models file entry may also set, for servers stricter than vLLM (an API
vendor that refuses fields it does not know): chat_template_kwargs (replaces
--chat-template-kwargs for that model; {} sends none), omit_token_ids
(no return_token_ids), omit_logprobs (no logprobs/top_logprobs) and
max_completion_tokens (--max-tokens sent under that name); see
examples/experiments/coordination-gap/endpoints.yaml.
With neither flag, the embedded reference backend's base policy is
evaluated in-process; --base-coordination sets its strength, as
trainer.base_coordination does for a run (-1 to 1; 0, the default, is the
default base; docs/CONFIG.md names the calibrated values):
  grpo eval --n 5 --episodes 50 --seed 2000000 --base-coordination -0.2

Every episode of a model sees the same tables (seeds) as the other models'.

Checkpoints of a stored run, on the run's test split (DESIGN §11):
  grpo eval --db DB --run RUN --step best|last|base|N[,...] [--n 5,10,15] [--episodes 100]
plays the test tables (test.seed, test.seed+1, ...; test.n and
test.episodes of the run's config, which --n and --episodes override, and
without test.n the sizes the run trains at: env.n, or its curriculum's
sizes) with the run's own env,
reward and inference settings. With the embedded backend the adapters are
served from the run's data directory; with endpoints they are loaded into
them (by name and stored path), and only the ones eval loaded are unloaded
after. --endpoint URL (repeatable) serves them from other endpoints than
the run's, e.g. its vLLM restarted on another port (same served base
model; the adapter paths must be readable there). Each result's model is
RUN@STEP.
`

// target is one model on one endpoint. The request options are for
// servers stricter than vLLM (an API vendor refusing fields it does not
// know); the defaults suit vLLM.
type target struct {
	Name      string `yaml:"name"`
	URL       string `yaml:"url"`
	APIKeyEnv string `yaml:"api_key_env"`
	// ChatTemplateKwargs, when set, replaces --chat-template-kwargs for
	// this model ({} sends none).
	ChatTemplateKwargs *map[string]any `yaml:"chat_template_kwargs"`
	// OmitTokenIDs leaves vLLM's return_token_ids out of the requests.
	OmitTokenIDs bool `yaml:"omit_token_ids"`
	// OmitLogprobs leaves logprobs and top_logprobs out.
	OmitLogprobs bool `yaml:"omit_logprobs"`
	// MaxCompletionTokens sends --max-tokens as max_completion_tokens.
	MaxCompletionTokens bool `yaml:"max_completion_tokens"`
	apiKey              string
	// keyNamed: the user named APIKeyEnv (a models file's api_key_env,
	// --api-key-env), so an unset variable is worth a warning; the
	// default OPENAI_API_KEY is unset for most local servers.
	keyNamed bool
	// base: the embedded reference backend's base policy, started
	// in-process (no --base-url nor --models).
	base bool
}

// endpoint is the target as a fleet's endpoint, with its request options.
func (t target) endpoint() run.Endpoint {
	return run.Endpoint{URL: t.URL, APIKey: t.apiKey, OmitTokenIDs: t.OmitTokenIDs, OmitLogprobs: t.OmitLogprobs, MaxCompletionTokens: t.MaxCompletionTokens}
}

// EvalCommand is `grpo eval`: ParseFlags reads and checks the flags (and
// the --models file), Run plays the episodes.
type EvalCommand struct {
	*Main
	opts evalOptions
	// embedded: no --base-url nor --models, so Run evaluates the embedded
	// reference backend's base policy in-process.
	embedded bool
	// baseCoordination is the embedded base's strength (--base-coordination).
	baseCoordination float64
	// ckpt is set by --run: evaluate a stored run's checkpoints.
	ckpt *checkpointEval
	prof profiles
}

// checkpointEval is the --db --run --step mode.
type checkpointEval struct {
	db, run  string
	steps    []string // best, last, base or a step number, as given
	ns       []int    // nil: the run's test sizes (config.Config.TestSizes)
	episodes int      // 0: the run's test.episodes
	// endpoints, when set, replace the run's inference endpoints (each
	// with the key in the variable apiKeyEnv).
	endpoints []string
	apiKeyEnv string
}

type evalOptions struct {
	targets     []target
	ns          []int
	episodes    int
	env         rollout.EnvConfig
	reward      rollout.RewardConfig
	sampling    rollout.Sampling
	seed        int64
	concurrency int
	timeout     time.Duration
	retries     int
	retryBudget time.Duration
	outage      time.Duration
	replays     int
	maxErrored  float64
	out         string
	maxRecord   int64
	maxOut      int64
	json        bool
	// baseCoordination is the embedded base's strength, for a base target.
	baseCoordination float64
}

// ParseFlags parses the command line of `grpo eval`.
func (c *EvalCommand) ParseFlags(args []string) error {
	fs := c.newFlags("eval", evalSynopsis)
	var models listFlag
	baseURL := fs.String("base-url", "", "OpenAI-compatible base URL, including /v1 (e.g. http://127.0.0.1:8000/v1)")
	fs.Var(&models, "model", "model name served at --base-url (repeatable)")
	modelsFile := fs.String("models", "", "YAML file listing models on different endpoints: [{name, url, api_key_env}]")
	apiKeyEnv := fs.String("api-key-env", "OPENAI_API_KEY", "environment variable holding the API key for --base-url")
	nList := fs.String("n", "5", "table sizes, comma-separated (e.g. 5,10,15)")
	episodes := fs.Int("episodes", 30, "episodes per model and n")
	rounds := fs.Int("rounds", 5, "rounds per episode")
	mode := fs.String("mode", "simultaneous", "simultaneous | sequential")
	patience := fs.Int("deadlock-patience", 1, "consecutive stuck rounds that end an episode")
	reward := fs.String("reward", "shaped", "reward function: shaped | paper")
	seed := fs.Int64("seed", 1, "seed for tables (tie-breaks) and sampling")
	temperature := fs.Float64("temperature", 1.0, "sampling temperature (0 = greedy)")
	maxTokens := fs.Int("max-tokens", 512, fmt.Sprintf("max_tokens per call (1 to %d, as inference.max_tokens)", config.MaxTokensBound.Max))
	toolChoice := fs.String("tool-choice", "auto", "tool_choice: auto | required | none")
	kwargs := fs.String("chat-template-kwargs", "", `JSON object passed through as chat_template_kwargs (e.g. '{"enable_thinking": false}')`)
	concurrency := fs.Int("concurrency", 64, fmt.Sprintf("max in-flight requests (1 to %d, as inference.concurrency)", config.ConcurrencyBound.Max))
	timeout := fs.Duration("request-timeout", 60*time.Second, fmt.Sprintf("timeout of one request attempt (at most %s, as inference.request_timeout)", config.RequestTimeoutBound.MaxString()))
	retries := fs.Int("retries", 3, fmt.Sprintf("retries of a failed request (429, 5xx, connection errors, timeouts) before the endpoint is judged failing (0 to %d, as inference.retries)", config.RetriesBound.Max))
	retryBudget := fs.Duration("retry-budget", 2*time.Minute, fmt.Sprintf("how long a request that keeps failing at its endpoint is sent again (with backoff) before the endpoint is drained (0: drain at once; at most %s, as inference.retry_budget)", config.RetryBudgetBound.MaxString()))
	outage := fs.Duration("outage-window", 2*time.Minute, fmt.Sprintf("with the endpoint drained, how long requests wait for it to answer again (0: fail at once; at most %s, as inference.outage_window)", config.OutageWindowBound.MaxString()))
	replays := fs.Int("episode-replays", 2, fmt.Sprintf("times an episode whose call still fails after the retries is replayed from its seeds (the same episode) before it counts as errored (0 to %d, as inference.episode_replays)", config.EpisodeReplaysBound.Max))
	maxErrored := fs.Float64("max-errored-fraction", 0.1, "fail when more than this fraction of a model's episodes at one n errored after replays (1: never)")
	out := fs.String("out", "", "write one JSON record per episode (config, metrics, reward terms, transcripts) to this .jsonl file")
	maxRecord := fs.Int64("max-record-bytes", defaultMaxRecordBytes, "with --out: largest record (one episode, transcripts included) written; a larger one fails the evaluation")
	maxOut := fs.Int64("max-out-bytes", defaultMaxOutBytes, "with --out: largest file written (whole records only); a record that would pass it fails the evaluation")
	asJSON := fs.Bool("json", false, "print a machine-readable summary on stdout instead of the table")
	db := fs.String("db", "", "with --run: the store holding the run")
	runName := fs.String("run", "", "evaluate this stored run's checkpoints on its test split (needs --db)")
	stepList := fs.String("step", "base,best,last", "with --run: best, last, base or step numbers, comma-separated")
	var runEndpoints listFlag
	fs.Var(&runEndpoints, "endpoint", "with --run: serve the checkpoints from this OpenAI-compatible base URL instead of the run's endpoints (repeatable; e.g. the run's vLLM restarted on another port); its key from --api-key-env")
	c.prof.flags(fs, "the evaluation (the client's whole process; with the embedded backend, its server too)")
	baseCoord := fs.Float64("base-coordination", 0, "with neither --base-url nor --models: the embedded base policy's strength, -1 to 1 (trainer.base_coordination; 0: the default base)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["db"] || set["run"] || set["step"] {
		f := checkpointFlags{set: set, db: *db, run: *runName, steps: *stepList, n: *nList, episodes: *episodes,
			concurrency: *concurrency, timeout: *timeout, retries: *retries, retryBudget: *retryBudget, outage: *outage,
			out: *out, maxRecord: *maxRecord, maxOut: *maxOut, json: *asJSON}
		if err := c.parseCheckpointFlags(f); err != nil {
			return err
		}
		for _, u := range runEndpoints {
			if err := checkURL("endpoint", u, "http://127.0.0.1:8000/v1"); err != nil {
				return err
			}
		}
		if set["api-key-env"] && len(runEndpoints) == 0 {
			return usagef("--api-key-env with --run names the key of --endpoint; without --endpoint the run's endpoints use their own api_key_env")
		}
		c.ckpt.endpoints, c.ckpt.apiKeyEnv = runEndpoints, *apiKeyEnv
		return nil
	}
	if set["endpoint"] {
		return usagef("--endpoint serves a stored run's checkpoints (with --db and --run); to evaluate a model on a server use --base-url and --model")
	}
	if err := checkDurations(*timeout, *retryBudget, *outage); err != nil {
		return err
	}
	o := &c.opts
	*o = evalOptions{episodes: *episodes, seed: *seed, concurrency: *concurrency, timeout: *timeout, retries: *retries, retryBudget: *retryBudget, outage: *outage, replays: *replays, maxErrored: *maxErrored, out: *out, maxRecord: *maxRecord, maxOut: *maxOut, json: *asJSON}
	for _, c := range []struct {
		name   string
		v, min int
	}{
		{"episodes", o.episodes, 1}, {"rounds", *rounds, 1}, {"deadlock-patience", *patience, 1},
	} {
		if err := atLeast(c.name, c.v, c.min); err != nil {
			return err
		}
	}
	// The flags that set a run's inference keys accept what the keys do.
	for _, c := range []struct {
		name  string
		v     int
		bound config.Bound[int]
	}{
		{"max-tokens", *maxTokens, config.MaxTokensBound}, {"concurrency", o.concurrency, config.ConcurrencyBound},
		{"retries", o.retries, config.RetriesBound}, {"episode-replays", o.replays, config.EpisodeReplaysBound},
	} {
		if err := within(c.name, c.v, c.bound); err != nil {
			return err
		}
	}
	if o.maxRecord < 1 {
		return usagef("--max-record-bytes %d: need at least 1", o.maxRecord)
	}
	if o.maxOut < 1 {
		return usagef("--max-out-bytes %d: need at least 1", o.maxOut)
	}
	if !(o.maxErrored >= 0 && o.maxErrored <= 1) {
		return usagef("--max-errored-fraction %v: need a fraction from 0 to 1", o.maxErrored)
	}
	var err error
	if o.ns, err = parseInts("n", *nList); err != nil {
		return err
	}
	o.env = rollout.EnvConfig{N: o.ns[0], Rounds: *rounds, Mode: rollout.Mode(*mode), DeadlockPatience: *patience}
	for _, n := range o.ns {
		e := o.env
		e.N = n
		if err := e.Validate(); err != nil {
			return usagef("%s", strings.Replace(strings.Replace(err.Error(), "env.", "--", 1), "_", "-", 1))
		}
	}
	fn, err := rollout.ParseRewardFunc(*reward)
	if err != nil {
		return usagef("--reward: %v", err)
	}
	o.reward = rollout.RewardConfig{Function: fn, Weights: rollout.DefaultWeights()}
	switch *toolChoice {
	case "auto", "required", "none":
	default:
		return usagef("--tool-choice %q: accepted: auto, required, none", *toolChoice)
	}
	if *temperature < 0 {
		return usagef("--temperature %v: must be >= 0", *temperature)
	}
	o.sampling = rollout.Sampling{Temperature: float32(*temperature), MaxTokens: *maxTokens, ToolChoice: *toolChoice}
	if *kwargs != "" {
		if err := json.Unmarshal([]byte(*kwargs), &o.sampling.ChatTemplateKwargs); err != nil {
			return usagef("--chat-template-kwargs %q: not a JSON object: %v", *kwargs, err)
		}
	}

	switch {
	case *modelsFile != "":
		if *baseURL != "" || len(models) > 0 {
			return usagef("--models cannot be combined with --base-url or --model")
		}
		if o.targets, err = readTargets(*modelsFile); err != nil {
			return err
		}
	case *baseURL != "":
		if err := checkURL("base-url", *baseURL, "http://127.0.0.1:8000/v1"); err != nil {
			return err
		}
		if len(models) == 0 {
			return usagef("--base-url needs at least one --model")
		}
		for _, name := range models {
			o.targets = append(o.targets, target{Name: name, URL: *baseURL, APIKeyEnv: *apiKeyEnv, keyNamed: set["api-key-env"]})
		}
	case len(models) > 0:
		return usagef("--model needs --base-url")
	default:
		c.embedded = true
	}
	if set["base-coordination"] {
		if !c.embedded {
			return usagef("--base-coordination sets the embedded backend's base; it cannot be combined with --base-url or --models")
		}
		if !(*baseCoord >= config.MinBaseCoordination && *baseCoord <= config.MaxBaseCoordination) {
			return usagef("--base-coordination %v: accepted %v to %v (0: the default base)", *baseCoord, config.MinBaseCoordination, config.MaxBaseCoordination)
		}
		c.baseCoordination = *baseCoord
	}
	return nil
}

// checkpointFlags are the flags the --run mode reads, as given.
type checkpointFlags struct {
	set                          map[string]bool // the flags given
	db, run, steps, n, out       string
	episodes                     int
	concurrency, retries         int
	timeout, retryBudget, outage time.Duration
	maxRecord, maxOut            int64
	json                         bool
}

// parseCheckpointFlags checks the --run mode's flags: the run's own
// settings replace every flag that would describe the table or the model.
func (c *EvalCommand) parseCheckpointFlags(f checkpointFlags) error {
	allowed := []string{"db", "run", "step", "n", "episodes", "json", "out", "max-record-bytes", "max-out-bytes", "concurrency", "request-timeout", "retries", "retry-budget", "outage-window", "endpoint", "api-key-env"}
	for name := range f.set {
		if !slices.Contains(allowed, name) {
			return usagef("--%s cannot be combined with --run: a run's checkpoints are evaluated with the run's own settings (accepted with --run: --%s)", name, strings.Join(allowed, ", --"))
		}
	}
	if f.run == "" {
		return usagef("--db and --step need --run RUN")
	}
	if f.db == "" {
		return usagef("--run needs --db DB, the store holding the run")
	}
	k := &checkpointEval{db: f.db, run: f.run}
	for _, s := range strings.Split(f.steps, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "best", "last", "base":
		default:
			if n, err := strconv.Atoi(s); err != nil || n < 0 {
				return usagef("--step %q: %q is not best, last, base or a step number", f.steps, s)
			}
		}
		k.steps = append(k.steps, s)
	}
	if f.set["n"] {
		ns, err := parseInts("n", f.n)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n < 2 {
				return usagef("--n %d: need at least 2 philosophers", n)
			}
		}
		k.ns = ns
	}
	if f.set["episodes"] {
		if f.episodes < 1 {
			return usagef("--episodes %d: need at least 1", f.episodes)
		}
		k.episodes = f.episodes
	}
	if err := within("concurrency", f.concurrency, config.ConcurrencyBound); err != nil {
		return err
	}
	if err := within("retries", f.retries, config.RetriesBound); err != nil {
		return err
	}
	if err := checkDurations(f.timeout, f.retryBudget, f.outage); err != nil {
		return err
	}
	if f.maxRecord < 1 {
		return usagef("--max-record-bytes %d: need at least 1", f.maxRecord)
	}
	if f.maxOut < 1 {
		return usagef("--max-out-bytes %d: need at least 1", f.maxOut)
	}
	c.ckpt = k
	c.opts = evalOptions{concurrency: f.concurrency, timeout: f.timeout, retries: f.retries, retryBudget: f.retryBudget, outage: f.outage, out: f.out, maxRecord: f.maxRecord, maxOut: f.maxOut, json: f.json}
	return nil
}

// checkDurations refuses a --request-timeout, --retry-budget or
// --outage-window that the inference key it sets would refuse.
func checkDurations(timeout, retryBudget, outage time.Duration) error {
	for _, c := range []struct {
		name  string
		v     time.Duration
		bound config.Bound[time.Duration]
	}{
		{"request-timeout", timeout, config.RequestTimeoutBound},
		{"retry-budget", retryBudget, config.RetryBudgetBound},
		{"outage-window", outage, config.OutageWindowBound},
	} {
		if err := within(c.name, c.v, c.bound); err != nil {
			return err
		}
	}
	return nil
}

// inference is the evaluation's request settings, as a run's config
// would give them.
func (o evalOptions) inference(base config.Inference) config.Inference {
	base.Concurrency = o.concurrency
	base.RequestTimeout = config.Duration(o.timeout)
	base.Retries = o.retries
	base.RetryBudget = config.Duration(o.retryBudget)
	base.OutageWindow = config.Duration(o.outage)
	return base
}

// Run evaluates every model at every table size and prints the results.
func (c *EvalCommand) Run(ctx context.Context) (err error) {
	stop, err := c.prof.start()
	if err != nil {
		return err
	}
	defer func() {
		if perr := stop(); err == nil {
			err = perr
		}
	}()
	if c.ckpt != nil {
		return c.runCheckpoints(ctx)
	}
	return c.runModels(ctx)
}

// runModels evaluates the models of --base-url, --models or the embedded
// backend.
func (c *EvalCommand) runModels(ctx context.Context) error {
	o := c.opts
	if c.embedded {
		o.targets = []target{{Name: run.EmbeddedModel, base: true}}
	}
	o.baseCoordination = c.baseCoordination
	o.targets = slices.Clone(o.targets)
	for i := range o.targets {
		if env := o.targets[i].APIKeyEnv; env != "" {
			o.targets[i].apiKey = c.Getenv(env)
			if o.targets[i].apiKey == "" && o.targets[i].keyNamed {
				fmt.Fprintf(c.Stderr, "grpo eval: WARNING: model %s: $%s (its api_key_env) is not set or empty: no API key is sent\n", o.targets[i].Name, env)
			}
		}
	}
	return c.runEval(ctx, o)
}

func readTargets(path string) ([]target, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read models file: %w", err)
	}
	var ts []target
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&ts); err != nil {
		// yaml names the Go type of an unknown field's struct: not the user's business.
		msg := strings.ReplaceAll(err.Error(), " in type main.target", "")
		return nil, fmt.Errorf("models file %s: %s (want a YAML list of {name, url, api_key_env, chat_template_kwargs, omit_token_ids, omit_logprobs, max_completion_tokens})", path, msg)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("models file %s lists no models (want a YAML list of {name, url, api_key_env})", path)
	}
	seen := map[string]int{}
	for i, t := range ts {
		if t.Name == "" || t.URL == "" {
			return nil, fmt.Errorf("models file %s: entry %d needs both name and url", path, i+1)
		}
		if j, ok := seen[t.Name+"\x00"+t.URL]; ok {
			return nil, fmt.Errorf("models file %s: entries %d and %d are both %s at %s: their results could not be told apart", path, j, i+1, t.Name, t.URL)
		}
		seen[t.Name+"\x00"+t.URL] = i + 1
		ts[i].keyNamed = t.APIKeyEnv != ""
		if u, err := url.Parse(t.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("models file %s: entry %d (%s): url %q: want an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1", path, i+1, t.Name, t.URL)
		}
	}
	return ts, nil
}

// evalResult is one model at one n, as printed by --json.
type evalResult struct {
	Model          string     `json:"model"`
	Run            string     `json:"run,omitempty"`         // --run: the run
	Step           *int       `json:"step,omitempty"`        // --run: the checkpoint's step
	SelectedBy     string     `json:"selected_by,omitempty"` // --run: best, last, base or step`
	N              int        `json:"n"`
	Episodes       int        `json:"episodes"`
	Errored        int        `json:"errored"`
	RewardFn       string     `json:"reward_fn"`
	Reward         rewardJSON `json:"reward"`
	DeadlockRate   float64    `json:"deadlock_rate"`
	MealsMean      float64    `json:"meals_mean"`
	InvalidRate    float64    `json:"invalid_rate"`
	StarvationMean float64    `json:"starvation_mean"`
	JainMean       float64    `json:"jain_mean"`
}

type rewardJSON struct {
	Mean float64    `json:"mean"`
	Std  float64    `json:"std"`
	CI95 [2]float64 `json:"ci95"`
}

func (m *Main) runEval(ctx context.Context, o evalOptions) error {
	// One connection pool sized to the requests in flight: a smaller one
	// closes and reopens connections on every call beyond it.
	logger := warnLogger(m.Stderr)
	hc := httpx.NewHTTPClient(o.concurrency, logger)
	defer hc.CloseIdleConnections()
	// Each model's endpoint is a fleet, as a run's endpoints are: a
	// request that keeps failing is sent again within the retry budget,
	// and an endpoint that went away is waited for within the outage
	// window.
	inf := o.inference(config.Inference{})
	peers := make([]*run.Peers, len(o.targets))
	for i, t := range o.targets {
		po := run.PeersOptions{Logger: logger, HTTPClient: hc}
		var (
			p   *run.Peers
			err error
		)
		if t.base {
			p, err = run.OpenBase(ctx, o.seed, o.baseCoordination, inf, po)
		} else {
			p, err = run.OpenEndpoint(ctx, t.endpoint(), t.Name, inf, po)
		}
		if err != nil {
			return fmt.Errorf("model %s: %w", t.Name, err)
		}
		defer p.Close()
		peers[i] = p
	}
	var sink *jsonlSink
	if o.out != "" {
		var err error
		if sink, err = createJSONL(o.out, o.maxRecord, o.maxOut); err != nil {
			return err
		}
		defer sink.Close()
	}
	// A record --out refuses stops the evaluation: its error is the cause.
	interrupt := ctx
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	limit := rollout.NewLimiter(o.concurrency)
	total := len(o.targets) * len(o.ns) * o.episodes
	bar := newProgress(m.Stderr, total, "episodes")
	var finished atomic.Int64
	var results []evalResult
	for i, t := range o.targets {
		opts := evaluate.Options{
			Client:      peers[i],
			Limit:       limit,
			Concurrency: o.concurrency,
			Replays:     o.replays, MaxErroredFraction: o.maxErrored,
			OnEpisode: func(ep rollout.Episode) {
				bar.Add(1)
				finished.Add(1)
				if sink != nil {
					if err := sink.Write(ep); err != nil {
						stop(err)
					}
				}
			},
		}
		for _, n := range o.ns {
			set := evalSet(t.Name, n, o)
			if t.ChatTemplateKwargs != nil {
				set.Sampling.ChatTemplateKwargs = *t.ChatTemplateKwargs
				if len(*t.ChatTemplateKwargs) == 0 {
					set.Sampling.ChatTemplateKwargs = nil
				}
			}
			res, err := evaluate.Run(ctx, opts, set)
			if interrupt.Err() != nil {
				// Ctrl-C: say what is kept, not "context canceled".
				msg := fmt.Sprintf("interrupted after %d of %d episodes", finished.Load(), total)
				if sink != nil {
					sink.Close()
					msg += fmt.Sprintf("; %s keeps %d whole records", o.out, sink.lines())
				}
				return errors.New(msg)
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if err != nil {
				return fmt.Errorf("model %s, n=%d: %w", t.Name, n, err)
			}
			st := res.Stats
			if st.Errored > 0 {
				fmt.Fprintf(m.Stderr, "grpo eval: WARNING: model %s, n=%d: %d of %d episodes errored even after %d replay(s); the figures leave them out and may be biased\n",
					t.Name, n, st.Errored, st.Episodes, o.replays)
			}
			results = append(results, newEvalResult(t.Name, string(o.reward.Function), n, res.Stats))
		}
	}
	bar.Finish()
	if sink != nil {
		if err := sink.Close(); err != nil {
			return err
		}
	}
	if o.json {
		enc := json.NewEncoder(m.Stdout)
		return enc.Encode(map[string]any{"results": results})
	}
	printEval(m.Stdout, results)
	return nil
}

// newEvalResult is one model at one n.
func newEvalResult(model, rewardFn string, n int, st grpo.EpisodeStats) evalResult {
	return evalResult{
		Model: model, N: n, Episodes: st.Episodes, Errored: st.Errored, RewardFn: rewardFn,
		Reward:       rewardJSON{Mean: st.Reward.Mean, Std: st.Reward.Std, CI95: st.Reward.CI95},
		DeadlockRate: st.DeadlockRate, MealsMean: st.MealsMean, InvalidRate: st.InvalidRate,
		StarvationMean: st.StarvationMean, JainMean: st.JainMean,
	}
}

// evalSet is the episodes of one model at one n. Episode e plays the
// table seeded seed+e for every model, so models are compared on the same
// tables; sampling seeds differ per episode.
func evalSet(model string, n int, o evalOptions) evaluate.Set {
	return evaluate.Set{
		Model: model, Env: o.env, Reward: o.reward, Sampling: o.sampling,
		N: []int{n}, Episodes: o.episodes,
		Seeds: func(n, e int) (int64, int64) { return o.seed + int64(e), rollout.RequestSeed(o.seed, n, e) },
		ID:    func(n, e int) string { return fmt.Sprintf("%s/n%d/e%d", model, n, e) },

		NoConversations: o.out == "", // conversations are only written by --out
	}
}

func printEval(w io.Writer, results []evalResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tN\tEPISODES\tREWARD\t95% CI\tDEADLOCK\tMEALS\tINVALID\tSTARVED\tJAIN\tERRORED")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.3f\t[%.3f, %.3f]\t%.2f\t%.2f\t%.3f\t%.2f\t%.2f\t%d\n",
			r.Model, r.N, r.Episodes-r.Errored, r.Reward.Mean, r.Reward.CI95[0], r.Reward.CI95[1],
			r.DeadlockRate, r.MealsMean, r.InvalidRate, r.StarvationMean, r.JainMean, r.Errored)
	}
	tw.Flush()
	if len(results) > 0 {
		fmt.Fprintf(w, "reward: %s; EPISODES counts scored episodes, ERRORED those lost to server failures.\n", results[0].RewardFn)
	}
}

// Defaults of the caps on --out.
const (
	defaultMaxRecordBytes = 64 << 20 // one episode's record
	defaultMaxOutBytes    = 1 << 30  // the whole file
)

// outFile is what a jsonlSink writes to: an *os.File.
type outFile interface {
	io.Writer
	Truncate(size int64) error
	Close() error
	Name() string
}

// jsonlSink writes one JSON record per line as episodes finish, so a
// crash loses nothing already played. Each record is written whole or
// not at all: a record over maxRecord, or one that would take the file
// past maxTotal, is refused (the first error sticks and later records
// are dropped), and a failed write is cut back to the last whole line.
type jsonlSink struct {
	mu        sync.Mutex
	f         outFile
	written   int64
	maxRecord int64
	maxTotal  int64
	count     int // whole records written
	err       error
	once      sync.Once
}

func createJSONL(path string, maxRecord, maxTotal int64) (*jsonlSink, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create --out file: %w", err)
	}
	return newJSONLSink(f, maxRecord, maxTotal), nil
}

func newJSONLSink(f outFile, maxRecord, maxTotal int64) *jsonlSink {
	return &jsonlSink{f: f, maxRecord: maxRecord, maxTotal: maxTotal}
}

// Write appends ep's record; the error (also kept for Close) says which
// cap refused it or why the write failed.
func (s *jsonlSink) Write(ep rollout.Episode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	b, err := json.Marshal(ep)
	if err != nil {
		s.err = fmt.Errorf("--out %s: encode episode %s: %w", s.f.Name(), ep.Spec.ID, err)
		return s.err
	}
	b = append(b, '\n')
	n := int64(len(b))
	switch {
	case n > s.maxRecord:
		s.err = fmt.Errorf("--out %s: episode %s's record is %d bytes, over --max-record-bytes %d (raise it, or lower --max-tokens); %d whole records written",
			s.f.Name(), ep.Spec.ID, n, s.maxRecord, s.lines())
	case s.written+n > s.maxTotal:
		s.err = fmt.Errorf("--out %s: episode %s's record (%d bytes) would take the file to %d bytes, over --max-out-bytes %d (raise it, or evaluate fewer episodes); the file keeps the %d bytes of whole records written",
			s.f.Name(), ep.Spec.ID, n, s.written+n, s.maxTotal, s.written)
	}
	if s.err != nil {
		return s.err
	}
	if _, err := s.f.Write(b); err != nil {
		s.err = fmt.Errorf("--out %s: write episode %s: %w", s.f.Name(), ep.Spec.ID, err)
		if terr := s.f.Truncate(s.written); terr != nil {
			s.err = fmt.Errorf("%w; cutting the partial line failed too: %v", s.err, terr)
		}
		return s.err
	}
	s.written += n
	s.count++
	return nil
}

func (s *jsonlSink) lines() int { return s.count }

func (s *jsonlSink) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.f.Close(); s.err == nil && err != nil {
			s.err = fmt.Errorf("--out %s: %w", s.f.Name(), err)
		}
	})
	return s.err
}

// pick is one checkpoint to evaluate.
type pick struct {
	step       int
	selectedBy string // best, last, base or step
	adapter    *checkpoint.Adapter
}

// choose resolves --step against the stored run.
func (r *report) choose(steps []string) ([]pick, error) {
	if len(r.steps) == 0 {
		return nil, fmt.Errorf("run %s has no committed step yet", r.run.Name)
	}
	byStep := map[int]checkpoint.Step{}
	for _, s := range r.steps {
		byStep[s.Step] = s
	}
	last := r.steps[len(r.steps)-1]
	var out []pick
	for _, f := range steps {
		switch f {
		case "base":
			out = append(out, pick{step: 0, selectedBy: "base"})
		case "last":
			out = append(out, pick{step: last.Step, selectedBy: "last", adapter: last.Adapter})
		case "best":
			if r.sel == nil {
				return nil, fmt.Errorf("run %s has no selected step yet (no validation to choose on)", r.run.Name)
			}
			out = append(out, pick{step: r.sel.Step, selectedBy: "best", adapter: byStep[r.sel.Step].Adapter})
		default:
			n, _ := strconv.Atoi(f)
			s, ok := byStep[n]
			if !ok {
				return nil, fmt.Errorf("--step %d: run %s has no step %d (it has steps 0..%d)", n, r.run.Name, n, last.Step)
			}
			out = append(out, pick{step: n, selectedBy: "step", adapter: s.Adapter})
		}
	}
	return out, nil
}

// runCheckpoints is `grpo eval --db --run --step`: the chosen checkpoints
// of a stored run on its test split.
func (c *EvalCommand) runCheckpoints(ctx context.Context) (err error) {
	k, o := c.ckpt, c.opts
	defer func() { err = withRunNames(ctx, k.db, k.run, err) }()
	if _, err := os.Stat(k.db); err != nil {
		return fmt.Errorf("open store %s: %w", k.db, err)
	}
	store := checkpoint.New(k.db, checkpoint.Options{})
	// The measurements are written into the store: not into a damaged one.
	if err := store.Check(ctx); err != nil {
		return err
	}
	rep, err := loadReport(ctx, store, k.run)
	if err != nil {
		return err
	}
	cfg, err := config.FromJSON(rep.run.Config)
	if err != nil {
		return fmt.Errorf("run %s: read its stored config: %w", k.run, err)
	}
	picks, err := rep.choose(k.steps)
	if err != nil {
		return err
	}
	if len(k.endpoints) > 0 {
		if cfg.Embedded() {
			return usagef("--endpoint: run %s used the embedded backend, whose adapters eval serves in-process; --endpoint is for runs trained against endpoints", k.run)
		}
		cfg.Inference.Endpoints = nil
		for _, u := range k.endpoints {
			cfg.Inference.Endpoints = append(cfg.Inference.Endpoints, config.Endpoint{URL: u, APIKeyEnv: k.apiKeyEnv})
		}
	}
	ns, episodes := k.ns, k.episodes
	if ns == nil {
		ns = cfg.TestSizes()
	}
	if episodes == 0 {
		episodes = cfg.Test.Episodes
	}

	keep, err := testStorer(ctx, c.Stderr, store, k.run, cfg.Test.Seed)
	if err != nil {
		return err
	}
	var stored []string
	results, _, err := testCheckpoints(ctx, c.Getenv, c.Stderr, cfg, picks, ns, episodes, o, func(s int, res evaluate.Result) error {
		if err := keep(s, res); err != nil {
			return err
		}
		stored = append(stored, strconv.Itoa(s))
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			kept := "no checkpoint's measurement was finished"
			if len(stored) > 0 {
				kept = "the test measurements of step " + strings.Join(stored, ", ") + " are stored in " + k.db
			}
			return fmt.Errorf("interrupted: %s (the same command measures the rest): %w", kept, err)
		}
		return err
	}
	if o.json {
		return json.NewEncoder(c.Stdout).Encode(map[string]any{"results": results})
	}
	fmt.Fprintf(c.Stdout, "run %s on its test split: %d tables per n from seed %d\n", k.run, episodes, cfg.Test.Seed)
	for i := range results {
		results[i].Model += " (" + results[i].SelectedBy + ")"
	}
	printEval(c.Stdout, results)
	return nil
}

// testCheckpoints plays the test split of a run's config (ns x episodes
// tables) with each picked checkpoint, on the run's own peers opened for
// evaluation (run.OpenPeers): a fresh embedded backend loading the
// adapters from their stored paths (the run's data directory), or the
// run's endpoints, into which the adapters are loaded (and unloaded
// after). It returns one result per pick and n, and each step's full
// result (episodes in TestSet order).
//
// keep, when not nil, is given each step's result as soon as it is
// measured (storeTest: an interrupted evaluation keeps what it finished).
func testCheckpoints(ctx context.Context, getenv func(string) string, stderr io.Writer, cfg config.Config, picks []pick, ns []int, episodes int, o evalOptions, keep func(step int, res evaluate.Result) error) ([]evalResult, map[int]evaluate.Result, error) {
	name := cfg.Run.Name
	cfg.Inference = o.inference(cfg.Inference)
	peers, err := run.OpenPeers(ctx, cfg, run.PeersOptions{Getenv: getenv, Logger: warnLogger(stderr), Evaluate: true})
	if err != nil {
		return nil, nil, err
	}
	defer peers.Close()

	var sink *jsonlSink
	if o.out != "" {
		if sink, err = createJSONL(o.out, o.maxRecord, o.maxOut); err != nil {
			return nil, nil, err
		}
		defer sink.Close()
	}
	// A record --out refuses stops the evaluation: its error is the cause.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var cps []evaluate.Checkpoint
	for _, p := range picks {
		if !slices.ContainsFunc(cps, func(c evaluate.Checkpoint) bool { return c.Step == p.step }) {
			cps = append(cps, evaluate.Checkpoint{Step: p.step, Adapter: p.adapter})
		}
	}
	bar := newProgress(stderr, len(cps)*len(ns)*episodes, "test episodes")
	opts := evaluate.Options{
		Client: peers, Limit: rollout.NewLimiter(o.concurrency), Concurrency: o.concurrency,
		OnEpisode: func(ep rollout.Episode) {
			bar.Add(1)
			if sink != nil {
				if err := sink.Write(ep); err != nil {
					stop(err)
				}
			}
		},
	}
	done, err := evaluate.RunCheckpoints(ctx, opts, peers, evaluate.Checkpoints{Config: cfg, Checkpoints: cps, N: ns, Episodes: episodes, Keep: keep})
	if err != nil {
		return nil, nil, err
	}
	bar.Finish()
	if sink != nil {
		if err := sink.Close(); err != nil {
			return nil, nil, err
		}
	}
	var results []evalResult
	for _, p := range picks {
		for _, pn := range done[p.step].PerN {
			r := newEvalResult(fmt.Sprintf("%s@%d", name, p.step), string(cfg.Reward.Function), pn.N, pn.Stats)
			r.Run, r.Step, r.SelectedBy = name, &p.step, p.selectedBy
			results = append(results, r)
		}
	}
	return results, done, nil
}

// testStorer returns a function that keeps a step's test measurement in
// run name's store as soon as it is taken. A step's earlier measurement is
// replaced; when it was taken with other settings (seed, table sizes,
// episodes), a note on w says so.
func testStorer(ctx context.Context, w io.Writer, store *checkpoint.Store, name string, seed int64) (func(step int, res evaluate.Result) error, error) {
	old, err := store.TestEvaluations(ctx, name, checkpoint.SplitTest)
	if err != nil {
		return nil, err
	}
	before := map[int]checkpoint.TestEvaluation{}
	for _, te := range old {
		before[te.Evaluation.Step] = te
	}
	return func(s int, res evaluate.Result) error {
		te := checkpoint.TestEvaluation{Split: checkpoint.SplitTest, Seed: seed, Evaluation: res.Evaluation(s)}
		if prev, ok := before[s]; ok && testSettings(prev) != testSettings(te) {
			fmt.Fprintf(w, "note: step %d's stored test measurement (%s) is replaced by this one (%s)\n", s, testSettings(prev), testSettings(te))
		}
		// Not under the evaluation's context: a measurement taken is
		// kept even when an interruption comes as it is stored.
		return store.PutTestEvaluation(context.WithoutCancel(ctx), name, te)
	}, nil
}

// testSettings describes what a test measurement was taken on: its seed
// and episodes per table size.
func testSettings(te checkpoint.TestEvaluation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d", te.Seed)
	for _, p := range te.Evaluation.PerN {
		fmt.Fprintf(&b, ", n=%d: %d episodes", p.N, p.Episodes)
	}
	return b.String()
}
