package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/grpo-dev/grpo/internal/quote"
	"github.com/grpo-dev/grpo/rollout"
)

// ChatOptions configure a ChatClient. Zero values take the defaults.
type ChatOptions struct {
	APIKey         string        // sent as a bearer token; never logged
	HTTPClient     *http.Client  // default: a client with keep-alive pooling
	RequestTimeout time.Duration // per attempt; default 60s
	Retries        int           // extra attempts after the first; default 3, -1 for none
	Backoff        time.Duration // first retry delay, doubled each time; default 200ms
	MaxBody        int64         // largest response accepted; default 16 MiB
}

// ChatClient sends chat completions to one OpenAI-compatible endpoint
// through go-openai, keeping each sampled choice exactly as the server
// returned it. Transient failures (429, 5xx, connection errors, timeouts,
// bodies that are not a completion) are retried with exponential backoff.
type ChatClient struct {
	url    string
	client *openai.Client
	opts   ChatOptions
	sleep  func(context.Context, time.Duration) error
	tools  toolCache
}

var _ rollout.Completer = (*ChatClient)(nil)

// NewChatClient returns a client for baseURL, which includes the API
// prefix (e.g. http://127.0.0.1:8000/v1). It does no I/O.
func NewChatClient(baseURL string, opts ChatOptions) *ChatClient {
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 60 * time.Second
	}
	if opts.Retries == 0 {
		opts.Retries = 3
	} else if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 200 * time.Millisecond
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 16 << 20
	}
	hc := opts.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		hc = &http.Client{Transport: tr}
	}
	baseURL = strings.TrimRight(baseURL, "/")
	cfg := openai.DefaultConfig(opts.APIKey)
	cfg.BaseURL = baseURL
	cfg.HTTPClient = &capture{hc: hc, max: opts.MaxBody}
	return &ChatClient{url: baseURL, client: openai.NewClientWithConfig(cfg), opts: opts, sleep: sleepCtx}
}

// URL is the endpoint's base URL.
func (c *ChatClient) URL() string { return c.url }

// Complete sends req and returns its first choice.
func (c *ChatClient) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	var last error
	delay := c.opts.Backoff
	for attempt := 0; attempt <= c.opts.Retries; attempt++ {
		if attempt > 0 {
			if err := c.sleep(ctx, jitter(delay)); err != nil {
				return nil, c.wrap(req, attempt, fmt.Errorf("%w; last error: %v", err, last))
			}
			delay *= 2
		}
		comp, err := c.once(ctx, req)
		if err == nil {
			return comp, nil
		}
		last = err
		if ctx.Err() != nil || !retryable(err) {
			return nil, c.wrap(req, attempt+1, err)
		}
	}
	return nil, c.wrap(req, c.opts.Retries+1, last)
}

func (c *ChatClient) wrap(req *rollout.Request, attempts int, err error) error {
	return fmt.Errorf("chat completion at %s/chat/completions (model %q, %d attempt(s)): %w", c.url, req.Model, attempts, err)
}

func (c *ChatClient) once(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	r := req.ChatCompletionRequest
	sl := &slot{}
	if len(r.Tools) > 0 {
		// The tool list is the same on every call of a run: encode it once
		// and splice it into the body (see capture.Do).
		sl.tools, r.Tools = c.tools.encode(r.Tools), nil
	}
	if len(r.Messages) > 0 && len(req.EncodedMessages) == len(r.Messages) {
		// Likewise the messages the caller has already encoded.
		sl.messages, r.Messages = joinJSON(req.EncodedMessages), nil
	}
	resp, err := c.client.CreateChatCompletion(context.WithValue(ctx, bodyKey{}, sl), r)
	raw := sl.body
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &TimeoutError{After: c.opts.RequestTimeout}
		}
		return nil, explain(err, raw)
	}
	var body struct {
		Choices []json.RawMessage `json:"choices"`
	}
	if err := json.Unmarshal(raw, &body); err != nil || len(body.Choices) == 0 || len(resp.Choices) == 0 {
		return nil, &GarbageError{Body: quote.Body(raw)}
	}
	return &rollout.Completion{Choice: resp.Choices[0], Raw: body.Choices[0], Usage: resp.Usage}, nil
}

// TimeoutError is an attempt that outlived the per-request timeout.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("no answer within %s", e.After) }

// GarbageError is a 2xx answer that is not a chat completion. Body is
// the start of the answer, quoted.
type GarbageError struct{ Body string }

func (e *GarbageError) Error() string {
	return "answer is not a chat completion with choices: " + e.Body
}

// explain turns go-openai's decode errors into a GarbageError that quotes
// the body, and keeps API errors as they are.
func explain(err error, raw []byte) error {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	if errors.As(err, &apiErr) || errors.As(err, &reqErr) {
		return err
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) || errors.Is(err, io.ErrUnexpectedEOF) {
		return &GarbageError{Body: quote.Body(raw)}
	}
	return err
}

// retryable: 429, 5xx, connection failures, timeouts and garbage bodies.
func retryable(err error) bool {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		return apiErr.HTTPStatusCode == http.StatusTooManyRequests || apiErr.HTTPStatusCode >= 500
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) {
		return reqErr.HTTPStatusCode == http.StatusTooManyRequests || reqErr.HTTPStatusCode >= 500
	}
	var te *TimeoutError
	var ge *GarbageError
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &te) || errors.As(err, &ge) || errors.As(err, &ne) || errors.As(err, &oe) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type bodyKey struct{}

// slot carries per-request data between Complete and the HTTP client.
type slot struct {
	tools    []byte // pre-encoded "tools" value to add to the request body
	messages []byte // pre-encoded "messages" value to put in the body
	body     []byte // the response body, as received
}

// joinJSON encodes a JSON array of already-encoded values.
func joinJSON(vals []json.RawMessage) []byte {
	n := 2
	for _, v := range vals {
		n += len(v) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, v := range vals {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']')
}

// toolCache remembers the encoding of tool lists by identity: callers pass
// the same slice on every call.
type toolCache struct {
	mu   sync.Mutex
	byID map[*openai.Tool][]byte
}

func (t *toolCache) encode(tools []openai.Tool) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.byID[&tools[0]]; ok {
		return b
	}
	b, err := json.Marshal(tools)
	if err != nil {
		panic(err) // Tool values always encode
	}
	if t.byID == nil || len(t.byID) > 64 {
		t.byID = map[*openai.Tool][]byte{}
	}
	t.byID[&tools[0]] = b
	return b
}

// nullMessages is how go-openai encodes a request whose Messages is nil.
// The model name comes before it and is a JSON string, in which a quote
// is escaped, so the first occurrence is the field.
var nullMessages = []byte(`"messages":null`)

// splice puts pre-encoded messages in place of "messages":null and adds
// ,"tools":<tools> before the closing brace of a JSON object body.
func splice(body, messages, tools []byte) ([]byte, error) {
	out := make([]byte, 0, len(body)+len(messages)+len(tools)+10)
	if messages != nil {
		i := bytes.Index(body, nullMessages)
		if i < 0 {
			return nil, errors.New(`encode request: no "messages":null to fill`)
		}
		out = append(out, body[:i]...)
		out = append(out, `"messages":`...)
		out = append(out, messages...)
		body = body[i+len(nullMessages):]
	}
	if tools != nil {
		end := bytes.LastIndexByte(body, '}')
		if end < 0 {
			return nil, errors.New("encode request: body is not a JSON object")
		}
		out = append(out, body[:end]...)
		out = append(out, `,"tools":`...)
		out = append(out, tools...)
		body = body[end:]
	}
	return append(out, body...), nil
}

// capture is the HTTP client go-openai uses: it reads each response body
// whole (up to max), hands a copy to the caller's slot in the request
// context, and gives go-openai an in-memory reader of the same bytes.
type capture struct {
	hc  *http.Client
	max int64
}

func (c *capture) Do(req *http.Request) (*http.Response, error) {
	sl, _ := req.Context().Value(bodyKey{}).(*slot)
	if sl != nil && (sl.tools != nil || sl.messages != nil) && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
		if body, err = splice(body, sl.messages, sl.tools); err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	buf, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if int64(len(buf)) > c.max {
		return nil, &GarbageError{Body: fmt.Sprintf("(answer larger than %d bytes)", c.max)}
	}
	if sl != nil {
		sl.body = buf
	}
	resp.Body = io.NopCloser(bytes.NewReader(buf))
	return resp, nil
}
