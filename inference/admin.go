package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminOptions configure an AdminClient. Zero values take the defaults.
type AdminOptions struct {
	APIKey         string        // sent as a bearer token; never logged
	HTTPClient     *http.Client  // default http.DefaultClient
	RequestTimeout time.Duration // per request; default 60s (loading an adapter takes seconds)
}

// AdminClient manages one OpenAI-compatible endpoint beyond chat: LoRA
// adapters (vLLM's runtime API), the model list, health and load. It is
// safe for concurrent use.
type AdminClient struct {
	base    string // includes the API prefix, e.g. http://127.0.0.1:8000/v1
	root    string // the server root, for /health and /metrics
	apiKey  string
	hc      *http.Client
	timeout time.Duration
}

// NewAdminClient returns a client for baseURL, which includes the API
// prefix (e.g. http://127.0.0.1:8000/v1); /health and /metrics are read
// from the server root, baseURL without a trailing /v1. It does no I/O.
func NewAdminClient(baseURL string, opts AdminOptions) *AdminClient {
	base := strings.TrimRight(baseURL, "/")
	c := &AdminClient{
		base:    base,
		root:    strings.TrimSuffix(base, "/v1"),
		apiKey:  opts.APIKey,
		hc:      opts.HTTPClient,
		timeout: opts.RequestTimeout,
	}
	if c.hc == nil {
		c.hc = http.DefaultClient
	}
	if c.timeout <= 0 {
		c.timeout = 60 * time.Second
	}
	return c
}

// URL is the endpoint's base URL, with its API prefix.
func (c *AdminClient) URL() string { return c.base }

// LoadAdapter loads the LoRA adapter at path under name. With inplace, an
// adapter already loaded under name is replaced; without it, that case
// returns an error matching ErrAdapterExists.
func (c *AdminClient) LoadAdapter(ctx context.Context, name, path string, inplace bool) error {
	req := LoadAdapterRequest{LoraName: name, LoraPath: path, LoadInplace: inplace}
	a, err := c.do(ctx, http.MethodPost, c.base+"/load_lora_adapter", req)
	if err == nil && a.status != http.StatusOK {
		err = a.adminError(classifyLoad)
	}
	if err != nil {
		return fmt.Errorf("load adapter %s: %w", name, err)
	}
	return nil
}

// UnloadAdapter unloads the adapter loaded under name. An adapter the
// server does not have returns an error matching ErrAdapterNotFound.
func (c *AdminClient) UnloadAdapter(ctx context.Context, name string) error {
	a, err := c.do(ctx, http.MethodPost, c.base+"/unload_lora_adapter", UnloadAdapterRequest{LoraName: name})
	if err == nil && a.status != http.StatusOK {
		err = a.adminError(classifyUnload)
	}
	if err != nil {
		return fmt.Errorf("unload adapter %s: %w", name, err)
	}
	return nil
}

// Models lists the served models: the base model and loaded adapters.
func (c *AdminClient) Models(ctx context.Context) ([]Model, error) {
	models, err := c.models(ctx)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	return models, nil
}

func (c *AdminClient) models(ctx context.Context) ([]Model, error) {
	a, err := c.do(ctx, http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	var list struct {
		Data *[]Model `json:"data"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil || list.Data == nil {
		return nil, a.notModelList(c.base)
	}
	return *list.Data, nil
}

// Health checks GET /health on the server root: vLLM answers 200 while its
// engine is alive.
func (c *AdminClient) Health(ctx context.Context) error {
	a, err := c.do(ctx, http.MethodGet, c.root+"/health", nil)
	if err == nil && (a.status < 200 || a.status > 299) {
		err = a.adminError(nil)
	}
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}

// answer is one HTTP exchange, whatever its status.
type answer struct {
	method, url string
	status      int
	contentType string
	body        []byte
}

// maxAnswer bounds how much of an answer is read.
const maxAnswer = 8 << 20

// do sends one request; body, if not nil, is sent as JSON. Only transport
// failures are errors: callers judge the status.
func (c *AdminClient) do(ctx context.Context, method, url string, body any) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return c.send(req)
}

func (c *AdminClient) send(req *http.Request) (answer, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read answer: %w", req.Method, req.URL, err)
	}
	return answer{
		method:      req.Method,
		url:         req.URL.String(),
		status:      resp.StatusCode,
		contentType: resp.Header.Get("Content-Type"),
		body:        data,
	}, nil
}
