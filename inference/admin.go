package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// AdminOptions configure an AdminClient. Zero values take the defaults.
type AdminOptions struct {
	APIKey         string        // sent as a bearer token; never logged
	HTTPClient     *http.Client  // default httpx.DefaultHTTPClient()
	RequestTimeout time.Duration // per attempt; default DefaultRequestTimeout (loading an adapter takes seconds)
	// Retry is the retry policy of every request but Health (httpx.Policy:
	// Retries extra attempts after the first, 0 none); nil takes
	// httpx.DefaultPolicy().
	Retry *httpx.Policy
}

// AdminClient manages one OpenAI-compatible endpoint beyond chat: LoRA
// adapters (vLLM's runtime API), the model list, health and load. It is
// safe for concurrent use.
type AdminClient struct {
	base string // includes the API prefix, e.g. http://127.0.0.1:8000/v1
	root string // the server root, for /health and /metrics
	http *httpx.Client
}

// NewAdminClient returns a client for baseURL, which includes the API
// prefix (e.g. http://127.0.0.1:8000/v1); /health and /metrics are read
// from the server root, baseURL without a trailing /v1. It does no I/O.
func NewAdminClient(baseURL string, opts AdminOptions) *AdminClient {
	base := strings.TrimRight(baseURL, "/")
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	retry := httpx.DefaultPolicy()
	if opts.Retry != nil {
		retry = *opts.Retry
	}
	return &AdminClient{
		base: base,
		root: strings.TrimSuffix(base, "/v1"),
		http: httpx.New(httpx.Options{HTTPClient: opts.HTTPClient, Retry: retry, Timeout: opts.RequestTimeout, BearerToken: opts.APIKey}),
	}
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

// Adapter returns the model the endpoint serves under name, as GET
// /v1/models lists it (an adapter's Root is its path); ok is false when it
// serves nothing of that name.
func (c *AdminClient) Adapter(ctx context.Context, name string) (m Model, ok bool, err error) {
	models, err := c.Models(ctx)
	if err != nil {
		return Model{}, false, err
	}
	for _, m := range models {
		if m.ID == name {
			return m, true, nil
		}
	}
	return Model{}, false, nil
}

func (c *AdminClient) models(ctx context.Context) ([]Model, error) {
	a, err := c.do(ctx, http.MethodGet, c.base+"/models", nil)
	if err != nil {
		return nil, err
	}
	if a.status == http.StatusTooManyRequests || a.status >= 500 && a.status != http.StatusNotImplemented {
		// The server is there but failing (after the retries): say so as
		// an AdminError, which a fleet counts as the endpoint's failure.
		return nil, a.adminError(nil)
	}
	var list struct {
		Data *[]Model `json:"data"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil || list.Data == nil {
		return nil, a.notModelList(c.base)
	}
	return *list.Data, nil
}

// Health checks GET /health on the server root once, without retries: it
// reports the endpoint as it is now. vLLM answers 200 while its engine is
// alive.
func (c *AdminClient) Health(ctx context.Context) error {
	a, err := c.send(ctx, &httpx.Request{Method: http.MethodGet, URL: c.root + "/health"}, false)
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
	server      httpx.ServerError // what an error body said
}

// do sends one request with retries; body, if not nil, is sent as JSON.
// Only transport failures are errors: callers judge the status.
func (c *AdminClient) do(ctx context.Context, method, url string, body any) (answer, error) {
	req := &httpx.Request{Method: method, URL: url}
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return answer{}, err
		}
		req.Body = data
	}
	return c.send(ctx, req, true)
}

// send makes the request, with the client's retries when retry is set,
// and turns a non-2xx status into an answer.
func (c *AdminClient) send(ctx context.Context, req *httpx.Request, retry bool) (answer, error) {
	var resp *httpx.Response
	var err error
	if retry {
		resp, _, err = c.http.Do(ctx, req)
	} else {
		resp, err = c.http.Send(ctx, req)
	}
	var se *httpx.StatusError
	switch {
	case errors.As(err, &se):
		return answer{
			method: se.Method, url: se.URL, status: se.StatusCode, contentType: se.ContentType, body: se.Body,
			server: httpx.ServerError{Message: se.Message, Type: se.Type, OpenAI: se.OpenAI},
		}, nil
	case err != nil:
		return answer{}, err
	}
	return answer{method: resp.Method, url: resp.URL, status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: resp.Body}, nil
}
