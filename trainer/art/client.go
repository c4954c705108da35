package art

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// Options configure a Client. Zero values take the defaults.
type Options struct {
	// HTTPClient sends the requests; it must not set an overall Timeout,
	// since /_train_model answers for as long as training runs. Default:
	// httpx.DefaultHTTPClient, the stock client every peer uses.
	HTTPClient *http.Client
	// RequestTimeout bounds each non-streaming request except
	// /_prepare_backend_for_training. Default 2m.
	RequestTimeout time.Duration
	// PrepareTimeout bounds /_prepare_backend_for_training, which starts
	// ART's vLLM and loads the base model. Default 15m.
	PrepareTimeout time.Duration
	// Retry is the retry policy of idempotent reads (GET, /_get_step),
	// with the meaning it has for every HTTP client of grpo (httpx.Policy:
	// Retries extra attempts after the first, 0 none). Nil: httpx's
	// default policy starting at 500ms. Writes are sent once.
	Retry *httpx.Policy
	// ServerArgs, when set, is sent to /_prepare_backend_for_training as
	// config.server_args (vLLM's host, port, api_key, ...).
	ServerArgs map[string]any
	// DeleteBenchmark is the history metric ART 0.4.0 to 0.5.7 uses to pick
	// the "best" checkpoint it keeps besides the latest. Default "val/reward".
	DeleteBenchmark string
}

// Client speaks to one ART backend server (`art run`, port 7999 by
// default). New does no I/O; Check learns the server's version, and every
// other call runs it first if it has not succeeded yet.
type Client struct {
	base *url.URL
	opts Options
	// reads retries by opts.Retry; writes sends once.
	reads, writes *httpx.Client

	mu    sync.Mutex
	proto *Protocol
}

// New returns a client of the ART server at baseURL (for example
// "http://127.0.0.1:7999").
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ART server URL %q: want http://host:port", baseURL)
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = httpx.DefaultHTTPClient()
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 2 * time.Minute
	}
	if opts.PrepareTimeout <= 0 {
		opts.PrepareTimeout = 15 * time.Minute
	}
	retry := httpx.DefaultPolicy()
	retry.BaseDelay = 500 * time.Millisecond
	if opts.Retry != nil {
		retry = *opts.Retry
	}
	if opts.DeleteBenchmark == "" {
		opts.DeleteBenchmark = "val/reward"
	}
	return &Client{base: u, opts: opts,
		reads:  httpx.New(httpx.Options{HTTPClient: opts.HTTPClient, Retry: retry, MaxBody: maxBody}),
		writes: httpx.New(httpx.Options{HTTPClient: opts.HTTPClient, MaxBody: maxBody}),
	}, nil
}

// Check reads the server's /openapi.json, refuses a version outside
// SupportedRange with a *VersionError (errors.Is ErrUnsupportedVersion),
// then asks /healthcheck. It returns what it detected.
func (c *Client) Check(ctx context.Context) (Protocol, error) {
	var doc []byte
	err := c.call(ctx, request{method: http.MethodGet, path: "/openapi.json", idempotent: true, timeout: c.opts.RequestTimeout}, &doc)
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound {
		return Protocol{}, &VersionError{URL: c.base.String(), Found: "no /openapi.json (404), so not a FastAPI server"}
	}
	if errors.As(err, &se) && se.StatusCode == http.StatusInternalServerError {
		// Retried like any read first: a 500 that stays is the schema
		// FastAPI cannot build for ART 0.5.9 and later.
		return Protocol{}, &VersionError{URL: c.base.String(), Found: "it looks like openpipe-art 0.5.9 or later: " + whyNoSchema}
	}
	if err != nil {
		return Protocol{}, fmt.Errorf("ART version check: %w", err)
	}
	p, err := detect(doc)
	if err != nil {
		return Protocol{}, &VersionError{URL: c.base.String(), Found: err.Error()}
	}
	var health struct {
		Status string `json:"status"`
	}
	if err := c.call(ctx, request{method: http.MethodGet, path: "/healthcheck", idempotent: true, timeout: c.opts.RequestTimeout}, &health); err != nil {
		return Protocol{}, fmt.Errorf("ART health check: %w", err)
	}
	if health.Status != "ok" {
		return Protocol{}, fmt.Errorf("ART health check: status %q, want \"ok\"", health.Status)
	}
	c.mu.Lock()
	c.proto = &p
	c.mu.Unlock()
	return p, nil
}

// protocol returns the detected protocol, checking the server first if
// needed.
func (c *Client) protocol(ctx context.Context) (Protocol, error) {
	c.mu.Lock()
	p := c.proto
	c.mu.Unlock()
	if p != nil {
		return *p, nil
	}
	return c.Check(ctx)
}

// Register registers m with ART (POST /register; the body is the model
// itself). It creates ART's model directory; it may be called again.
func (c *Client) Register(ctx context.Context, m Model) error {
	if err := m.Validate(); err != nil {
		return err
	}
	if _, err := c.protocol(ctx); err != nil {
		return err
	}
	if err := c.call(ctx, request{method: http.MethodPost, path: "/register", body: m, timeout: c.opts.RequestTimeout}, nil); err != nil {
		return fmt.Errorf("ART register %s: %w", m.Name, err)
	}
	return nil
}

// Prepare starts ART's training service and its vLLM for m (POST
// /_prepare_backend_for_training) and returns the OpenAI-compatible base URL
// and API key to sample from. ART names its own bind address, usually
// 0.0.0.0: an unspecified or loopback host is replaced by the ART server's
// host. That endpoint is the run's only inference endpoint; ART loads each
// new checkpoint there itself, so the caller must not call vLLM's
// load/unload adapter endpoints on it. Sample with InferenceModel. It may
// be called again, on resume: ART (0.4.12 checked) stops its OpenAI server
// and starts it anew on the same engine.
func (c *Client) Prepare(ctx context.Context, m Model) (baseURL, apiKey string, err error) {
	if err := m.Validate(); err != nil {
		return "", "", err
	}
	if _, err := c.protocol(ctx); err != nil {
		return "", "", err
	}
	body := struct {
		Model  Model `json:"model"`
		Config any   `json:"config"`
	}{Model: m}
	if len(c.opts.ServerArgs) > 0 {
		body.Config = map[string]any{"server_args": c.opts.ServerArgs}
	}
	var pair []string
	if err := c.call(ctx, request{method: http.MethodPost, path: "/_prepare_backend_for_training", body: body, timeout: c.opts.PrepareTimeout}, &pair); err != nil {
		return "", "", fmt.Errorf("ART prepare %s: %w", m.Name, err)
	}
	if len(pair) != 2 {
		return "", "", fmt.Errorf("ART prepare %s: answer has %d items, want [base_url, api_key]", m.Name, len(pair))
	}
	u, err := c.rewriteHost(pair[0])
	if err != nil {
		return "", "", fmt.Errorf("ART prepare %s: %w", m.Name, err)
	}
	return u, pair[1], nil
}

// rewriteHost replaces an unspecified or loopback host in ART's inference
// URL by the host the ART server was reached at, keeping scheme, port and
// path.
func (c *Client) rewriteHost(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("inference base URL %q: not a URL", raw)
	}
	h := u.Hostname()
	ip := net.ParseIP(h)
	if h == "localhost" || (ip != nil && (ip.IsUnspecified() || ip.IsLoopback())) {
		host := c.base.Hostname()
		if port := u.Port(); port != "" {
			u.Host = net.JoinHostPort(host, port)
		} else if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			u.Host = "[" + host + "]"
		} else {
			u.Host = host
		}
	}
	return u.String(), nil
}

// InferenceModel is the model name to sample m from ART's vLLM: every
// supported release serves one adapter named after the model, replaced in
// place after each step, so only the latest checkpoint can be sampled
// there. The context and step are kept for callers written against
// releases that named each step.
func (c *Client) InferenceModel(ctx context.Context, m Model, step int) (string, error) {
	if _, err := c.protocol(ctx); err != nil {
		return "", err
	}
	return m.Name, nil
}

// Step returns ART's current step for m (POST /_get_step): the number of
// its latest checkpoint, 0 before any training. ART has no idempotency key:
// a grpo step whose Train started at ART step b is done once Step is
// greater than b.
func (c *Client) Step(ctx context.Context, m Model) (int, error) {
	if _, err := c.protocol(ctx); err != nil {
		return 0, err
	}
	var step int
	if err := c.call(ctx, request{method: http.MethodPost, path: "/_get_step", body: m, idempotent: true, timeout: c.opts.RequestTimeout}, &step); err != nil {
		return 0, fmt.Errorf("ART step of %s: %w", m.Name, err)
	}
	return step, nil
}

// Log records trajectory groups with ART under split (for example "val")
// at ART's current step (POST /_log); ART logs their mean reward and
// metrics. A server without /_log gets nothing: Log returns an error
// matching ErrUnsupported.
func (c *Client) Log(ctx context.Context, m Model, groups []TrajectoryGroup, split string) error {
	p, err := c.protocol(ctx)
	if err != nil {
		return err
	}
	if !p.Log {
		return fmt.Errorf("ART log %s: /_log: %w (%s)", m.Name, ErrUnsupported, p.Releases)
	}
	body := struct {
		Model            Model             `json:"model"`
		TrajectoryGroups []TrajectoryGroup `json:"trajectory_groups"`
		Split            string            `json:"split"`
	}{m, nonNil(groups), split}
	if err := c.call(ctx, request{method: http.MethodPost, path: "/_log", body: body, timeout: c.opts.RequestTimeout}, nil); err != nil {
		return fmt.Errorf("ART log %s: %w", m.Name, err)
	}
	return nil
}

// DeleteCheckpoints deletes m's checkpoints except the steps in keep and
// ART's latest step, which ART needs to go on training. It returns the
// steps kept.
//
// ART's /_delete_checkpoints keeps only the latest step and the best by a
// logged metric (Options.DeleteBenchmark), which grpo cannot name: the
// request is sent only when every step in keep is the latest one;
// otherwise nothing is deleted and a *KeepError (errors.Is ErrCannotKeep)
// says why, so grpo's best checkpoint is never lost to ART's choice.
func (c *Client) DeleteCheckpoints(ctx context.Context, m Model, keep []int) ([]int, error) {
	p, err := c.protocol(ctx)
	if err != nil {
		return nil, err
	}
	latest, err := c.Step(ctx, m)
	if err != nil {
		return nil, err
	}
	steps := append([]int{latest}, keep...)
	slices.Sort(steps)
	steps = slices.Compact(steps)
	var lost []int
	for _, s := range steps {
		if s != latest {
			lost = append(lost, s)
		}
	}
	if len(lost) > 0 {
		return nil, &KeepError{Keep: lost, Latest: latest, Reason: "ART " + p.Releases + " cannot be told which steps to keep; checkpoints are left in place"}
	}
	q := url.Values{"benchmark": {c.opts.DeleteBenchmark}, "benchmark_smoothing": {"1"}}
	if err := c.call(ctx, request{method: http.MethodPost, path: "/_delete_checkpoints", query: q, body: m, timeout: c.opts.RequestTimeout}, nil); err != nil {
		return nil, fmt.Errorf("ART delete checkpoints of %s: %w", m.Name, err)
	}
	return steps, nil
}

func nonNil(g []TrajectoryGroup) []TrajectoryGroup {
	if g == nil {
		return []TrajectoryGroup{}
	}
	return g
}

// Occupant returns a model other than m that ART's vLLM already serves,
// or "" when there is none or nothing answers there. ART (0.4.0 to 0.5.0)
// trains one model per `art run`: the first call that needs a training
// service for a new model name kills every "model-service" process
// (pkill -9), so a second grpo run with another name would kill the first
// one's vLLM and trainer. ART has no endpoint that lists its models, so
// Occupant asks the vLLM address ART will use (Options.ServerArgs' port,
// ART's default 8000, on the ART server's host) for its /v1/models.
func (c *Client) Occupant(ctx context.Context, m Model) (string, error) {
	port, key := "8000", "default"
	if p, ok := c.opts.ServerArgs["port"]; ok {
		port = fmt.Sprint(p)
	}
	if k, ok := c.opts.ServerArgs["api_key"].(string); ok {
		key = k
	}
	u := url.URL{Scheme: c.base.Scheme, Host: net.JoinHostPort(c.base.Hostname(), port), Path: "/v1/models"}
	// A few seconds: a vLLM that is there answers its model list at once.
	probe, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(probe, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", nil // nothing answers there: no other model is served
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&list) != nil {
		return "", nil // not a vLLM answering with ART's key: not ART's
	}
	for _, d := range list.Data {
		if d.ID != m.Name && d.ID != m.BaseModel {
			return d.ID, nil
		}
	}
	return "", nil
}
