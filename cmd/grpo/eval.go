package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/inference"
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
With neither flag, the embedded reference backend's base policy is
evaluated in-process.

Every episode of a model sees the same tables (seeds) as the other models'.
`

// target is one model on one endpoint.
type target struct {
	Name      string `yaml:"name"`
	URL       string `yaml:"url"`
	APIKeyEnv string `yaml:"api_key_env"`
	apiKey    string
}

// EvalCommand is `grpo eval`: ParseFlags reads and checks the flags (and
// the --models file), Run plays the episodes.
type EvalCommand struct {
	*Main
	opts evalOptions
	// embedded: no --base-url nor --models, so Run evaluates the embedded
	// reference backend's base policy in-process.
	embedded bool
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
	replays     int
	maxErrored  float64
	out         string
	json        bool
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
	maxTokens := fs.Int("max-tokens", 512, "max_tokens per call")
	toolChoice := fs.String("tool-choice", "auto", "tool_choice: auto | required | none")
	kwargs := fs.String("chat-template-kwargs", "", `JSON object passed through as chat_template_kwargs (e.g. '{"enable_thinking": false}')`)
	concurrency := fs.Int("concurrency", 64, "max in-flight requests")
	timeout := fs.Duration("request-timeout", 60*time.Second, "timeout of one request attempt")
	retries := fs.Int("retries", 3, "retries of a failed request (429, 5xx, connection errors, timeouts)")
	replays := fs.Int("episode-replays", 2, "times an episode whose call still fails after the retries is replayed from its seeds (the same episode) before it counts as errored")
	maxErrored := fs.Float64("max-errored-fraction", 0.1, "fail when more than this fraction of a model's episodes at one n errored after replays (1: never)")
	out := fs.String("out", "", "write one JSON record per episode (config, metrics, reward terms, transcripts) to this .jsonl file")
	asJSON := fs.Bool("json", false, "print a machine-readable summary on stdout instead of the table")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	o := &c.opts
	*o = evalOptions{episodes: *episodes, seed: *seed, concurrency: *concurrency, timeout: *timeout, retries: *retries, replays: *replays, maxErrored: *maxErrored, out: *out, json: *asJSON}
	if o.replays < 0 {
		return usagef("--episode-replays %d: need 0 or more", o.replays)
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
	if o.episodes < 1 {
		return usagef("--episodes %d: need at least 1", o.episodes)
	}
	if o.concurrency < 1 {
		return usagef("--concurrency %d: need at least 1", o.concurrency)
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
			o.targets = append(o.targets, target{Name: name, URL: *baseURL, APIKeyEnv: *apiKeyEnv})
		}
	case len(models) > 0:
		return usagef("--model needs --base-url")
	default:
		c.embedded = true
	}
	return nil
}

// Run evaluates every model at every table size and prints the results.
func (c *EvalCommand) Run(ctx context.Context) error {
	o := c.opts
	if c.embedded {
		dir, err := os.MkdirTemp("", "grpo-eval-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		e, err := run.StartEmbedded(ctx, dir, o.seed, nil)
		if err != nil {
			return err
		}
		defer e.Close()
		o.targets = []target{{Name: run.EmbeddedModel, URL: e.InferenceURL}}
	}
	o.targets = slices.Clone(o.targets)
	for i := range o.targets {
		if env := o.targets[i].APIKeyEnv; env != "" {
			o.targets[i].apiKey = c.Getenv(env)
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
		return nil, fmt.Errorf("models file %s: %v (want a YAML list of {name, url, api_key_env})", path, err)
	}
	if len(ts) == 0 {
		return nil, fmt.Errorf("models file %s lists no models (want a YAML list of {name, url, api_key_env})", path)
	}
	for i, t := range ts {
		if t.Name == "" || t.URL == "" {
			return nil, fmt.Errorf("models file %s: entry %d needs both name and url", path, i+1)
		}
		if u, err := url.Parse(t.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("models file %s: entry %d (%s): url %q: want an http:// or https:// URL, e.g. http://127.0.0.1:8000/v1", path, i+1, t.Name, t.URL)
		}
	}
	return ts, nil
}

// evalResult is one model at one n, as printed by --json.
type evalResult struct {
	Model          string     `json:"model"`
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
	for _, t := range o.targets {
		if err := inference.NewAdminClient(t.URL, inference.AdminOptions{APIKey: t.apiKey, RequestTimeout: 10 * time.Second}).Probe(ctx); err != nil {
			return fmt.Errorf("model %s: %w", t.Name, err)
		}
	}
	var sink *jsonlSink
	if o.out != "" {
		var err error
		if sink, err = createJSONL(o.out); err != nil {
			return err
		}
		defer sink.Close()
	}
	limit := rollout.NewLimiter(o.concurrency)
	// One connection pool sized to the requests in flight: a smaller one
	// closes and reopens connections on every call beyond it.
	hc := httpx.NewHTTPClient(o.concurrency)
	defer hc.CloseIdleConnections()
	total := len(o.targets) * len(o.ns) * o.episodes
	bar := newProgress(m.Stderr, total, "episodes")
	var results []evalResult
	for _, t := range o.targets {
		opts := evaluate.Options{
			Client:      inference.NewChatClient(t.URL, inference.ChatOptions{APIKey: t.apiKey, HTTPClient: hc, RequestTimeout: o.timeout, Retry: retryPolicy(o.retries)}),
			Limit:       limit,
			Concurrency: o.concurrency,
			Replays:     o.replays, MaxErroredFraction: o.maxErrored,
			OnEpisode: func(ep rollout.Episode) {
				bar.Add(1)
				if sink != nil {
					sink.Write(ep)
				}
			},
		}
		for _, n := range o.ns {
			res, err := evaluate.Run(ctx, opts, evalSet(t.Name, n, o))
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
			if err != nil {
				return fmt.Errorf("model %s, n=%d: %w", t.Name, n, err)
			}
			st := res.Stats
			if st.Errored > 0 {
				fmt.Fprintf(m.Stderr, "grpo eval: WARNING: model %s, n=%d: %d of %d episodes errored even after %d replay(s); the figures leave them out and may be biased\n",
					t.Name, n, st.Errored, st.Episodes, o.replays)
			}
			results = append(results, evalResult{
				Model: t.Name, N: n, Episodes: st.Episodes, Errored: st.Errored, RewardFn: string(o.reward.Function),
				Reward:       rewardJSON{Mean: st.Reward.Mean, Std: st.Reward.Std, CI95: st.Reward.CI95},
				DeadlockRate: st.DeadlockRate, MealsMean: st.MealsMean, InvalidRate: st.InvalidRate,
				StarvationMean: st.StarvationMean, JainMean: st.JainMean,
			})
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

// retryPolicy is the default policy with the --retries count (0: none).
func retryPolicy(retries int) *httpx.Policy {
	p := httpx.DefaultPolicy()
	p.Retries = retries
	return &p
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

// jsonlSink writes one JSON record per line as episodes finish, so a
// crash loses nothing already played.
type jsonlSink struct {
	mu   sync.Mutex
	f    *os.File
	enc  *json.Encoder
	err  error
	once sync.Once
}

func createJSONL(path string) (*jsonlSink, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("create --out file: %w", err)
	}
	return &jsonlSink{f: f, enc: json.NewEncoder(f)}, nil
}

func (s *jsonlSink) Write(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = s.enc.Encode(v)
	}
}

func (s *jsonlSink) Close() error {
	s.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.f.Close(); s.err == nil {
			s.err = err
		}
	})
	if s.err != nil {
		return fmt.Errorf("write %s: %w", s.f.Name(), s.err)
	}
	return nil
}
