package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/quote"
	"github.com/grpo-dev/grpo/rollout"
)

// DefaultRequestTimeout bounds each attempt of a chat completion or an
// admin request unless the options say otherwise.
const DefaultRequestTimeout = 60 * time.Second

// ChatOptions configure a ChatClient. Zero values take the defaults.
type ChatOptions struct {
	APIKey         string        // sent as a bearer token; never logged
	HTTPClient     *http.Client  // default httpx.DefaultHTTPClient(); share one per run (httpx.NewHTTPClient)
	RequestTimeout time.Duration // per attempt; default DefaultRequestTimeout
	// Retry is the retry policy (httpx.Policy: Retries extra attempts
	// after the first, 0 none); nil takes httpx.DefaultPolicy().
	Retry   *httpx.Policy
	MaxBody int64 // largest answer accepted; default httpx.DefaultMaxBody

	// MaxCompletionTokens sends the request's token limit as
	// "max_completion_tokens" instead of "max_tokens", for servers (such as
	// OpenAI's, for reasoning models) that refuse the older name.
	MaxCompletionTokens bool
	// OmitTokenIDs leaves "return_token_ids" out of requests, for servers
	// that refuse fields they do not know. vLLM needs it to return the
	// token ids a trainer wants (DESIGN §5).
	OmitTokenIDs bool
	// OmitLogprobs leaves "logprobs" and "top_logprobs" out of requests,
	// for servers that refuse them (reasoning models of some vendors).
	// Evaluation does not need them; training does.
	OmitLogprobs bool
}

// ChatClient sends chat completions to one OpenAI-compatible endpoint,
// keeping each sampled choice exactly as the server returned it. It uses
// go-openai's types but builds and sends the HTTP request itself (through
// httpx), so no client-side validation stands between a model name and the
// server. Transient failures (429, 5xx, connection errors, timeouts, bodies
// that are not a completion) are retried by its policy.
type ChatClient struct {
	url     string
	http    *httpx.Client
	timeout time.Duration
	opts    ChatOptions
	tools   toolCache
}

var _ rollout.Completer = (*ChatClient)(nil)

// NewChatClient returns a client for baseURL, which includes the API
// prefix (e.g. http://127.0.0.1:8000/v1). It does no I/O.
func NewChatClient(baseURL string, opts ChatOptions) *ChatClient {
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	retry := httpx.DefaultPolicy()
	if opts.Retry != nil {
		retry = *opts.Retry
	}
	baseURL = strings.TrimRight(baseURL, "/")
	return &ChatClient{
		url: baseURL,
		http: httpx.New(httpx.Options{
			HTTPClient: opts.HTTPClient, Retry: retry, Timeout: opts.RequestTimeout,
			MaxBody: opts.MaxBody, BearerToken: opts.APIKey,
		}),
		timeout: opts.RequestTimeout,
		opts:    opts,
	}
}

// URL is the endpoint's base URL.
func (c *ChatClient) URL() string { return c.url }

// TimeoutError is an attempt that outlived the per-request timeout.
type TimeoutError = httpx.TimeoutError

// GarbageError is a 2xx answer that is not a chat completion.
type GarbageError = httpx.GarbageError

// ErrAutoToolChoice is wrapped by the error of a server that refuses
// tool_choice "auto" because it was started without tool parsing.
var ErrAutoToolChoice = errors.New(`the server does not accept tool_choice "auto": start vLLM with --enable-auto-tool-choice --tool-call-parser hermes`)

var errNotCompletion = errors.New("answer is not a chat completion with choices")

// Complete sends req and returns its first choice.
func (c *ChatClient) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	body, err := c.encode(req)
	if err != nil {
		return nil, c.wrap(req, 0, err)
	}
	var comp *rollout.Completion
	_, attempts, err := c.http.Do(ctx, &httpx.Request{
		Method: http.MethodPost, URL: c.url + "/chat/completions", Body: body,
		RetryGarbage: true,
		Accept: func(r *httpx.Response) error {
			var err error
			comp, err = decodeCompletion(r.Body)
			return err
		},
	})
	if err != nil {
		return nil, c.wrap(req, attempts, explain(err))
	}
	return comp, nil
}

func (c *ChatClient) wrap(req *rollout.Request, attempts int, err error) error {
	return fmt.Errorf("chat completion at %s/chat/completions (model %q, %d attempt(s)): %w", c.url, req.Model, attempts, err)
}

// explain names the server flags behind vLLM's 400 for tool_choice "auto"
// ("auto" tool choice requires --enable-auto-tool-choice and
// --tool-call-parser to be set).
func explain(err error) error {
	var se *httpx.StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusBadRequest &&
		(strings.Contains(se.Message, "enable-auto-tool-choice") || strings.Contains(se.Message, "tool-call-parser")) {
		return fmt.Errorf("%w: %w", ErrAutoToolChoice, err)
	}
	return err
}

// chatParams are the request's fields other than messages and tools, as
// they go on the wire. Temperature is always sent: 0 is greedy, not "the
// server's default".
type chatParams struct {
	Model               string          `json:"model"`
	ToolChoice          any             `json:"tool_choice,omitempty"`
	Temperature         float32         `json:"temperature"`
	TopP                float32         `json:"top_p,omitempty"`
	N                   int             `json:"n,omitempty"`
	Stop                []string        `json:"stop,omitempty"`
	MaxTokens           int             `json:"max_tokens,omitempty"`
	MaxCompletionTokens int             `json:"max_completion_tokens,omitempty"`
	PresencePenalty     float32         `json:"presence_penalty,omitempty"`
	FrequencyPenalty    float32         `json:"frequency_penalty,omitempty"`
	LogProbs            bool            `json:"logprobs,omitempty"`
	TopLogProbs         int             `json:"top_logprobs,omitempty"`
	Seed                *int            `json:"seed,omitempty"`
	User                string          `json:"user,omitempty"`
	ChatTemplateKwargs  map[string]any  `json:"chat_template_kwargs,omitempty"`
	ParallelToolCalls   any             `json:"parallel_tool_calls,omitempty"`
	ReturnTokenIDs      bool            `json:"return_token_ids,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
}

// encode builds the request body: the scalar fields encoded as an object,
// then the messages (each encoded once by the caller when it gave
// EncodedMessages, else here) and the tool list (encoded once per list)
// appended before its closing brace.
func (c *ChatClient) encode(req *rollout.Request) ([]byte, error) {
	r := &req.ChatCompletionRequest
	if r.Stream {
		return nil, errors.New("encode request: streaming is not supported")
	}
	p := chatParams{
		Model: r.Model, Temperature: r.Temperature, TopP: r.TopP, N: r.N, Stop: r.Stop,
		MaxTokens: r.MaxTokens, MaxCompletionTokens: r.MaxCompletionTokens,
		PresencePenalty: r.PresencePenalty, FrequencyPenalty: r.FrequencyPenalty,
		LogProbs: r.LogProbs, TopLogProbs: r.TopLogProbs, Seed: r.Seed, User: r.User,
		ChatTemplateKwargs: r.ChatTemplateKwargs, ParallelToolCalls: r.ParallelToolCalls,
		ReturnTokenIDs: !c.opts.OmitTokenIDs, ReasoningEffort: r.ReasoningEffort,
	}
	if r.ToolChoice != nil && r.ToolChoice != "" {
		p.ToolChoice = r.ToolChoice
	}
	if c.opts.OmitLogprobs {
		p.LogProbs, p.TopLogProbs = false, 0
	}
	if c.opts.MaxCompletionTokens && p.MaxCompletionTokens == 0 {
		p.MaxCompletionTokens, p.MaxTokens = p.MaxTokens, 0
	}
	if r.ResponseFormat != nil {
		b, err := json.Marshal(r.ResponseFormat)
		if err != nil {
			return nil, fmt.Errorf("encode response_format: %w", err)
		}
		p.ResponseFormat = b
	}
	head, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var tools []byte
	if len(r.Tools) > 0 {
		tools = c.tools.encode(r.Tools)
	}
	size := len(head) + len(tools) + 32
	enc := req.EncodedMessages
	if len(enc) != len(r.Messages) {
		enc = make([]json.RawMessage, len(r.Messages))
		for i := range r.Messages {
			if enc[i], err = json.Marshal(&r.Messages[i]); err != nil {
				return nil, fmt.Errorf("encode message %d: %w", i, err)
			}
		}
	}
	for _, m := range enc {
		size += len(m) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, head[:len(head)-1]...) // without its '}'
	out = append(out, `,"messages":[`...)
	for i, m := range enc {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	out = append(out, ']')
	if tools != nil {
		out = append(out, `,"tools":`...)
		out = append(out, tools...)
	}
	return append(out, '}'), nil
}

// decodeCompletion reads a chat completion answer: the first choice parsed
// and as received, the usage, and the top-level prompt_token_ids when the
// server returned them.
func decodeCompletion(body []byte) (*rollout.Completion, error) {
	// One decoding pass for the fields read; the first choice's bytes are
	// then found by a scan that only matches brackets (rawFirstChoice).
	var resp struct {
		Choices        []wireChoice    `json:"choices"`
		Usage          openai.Usage    `json:"usage"`
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	}
	garbage := &GarbageError{Body: quote.Body(body), Err: errNotCompletion}
	if err := json.Unmarshal(body, &resp); err != nil {
		var ute *json.UnmarshalTypeError
		if !errors.As(err, &ute) {
			return nil, garbage
		}
		return decodeCompletionSlow(body)
	}
	if len(resp.Choices) == 0 {
		return nil, garbage
	}
	raw := rawFirstChoice(body)
	if raw == nil {
		// A shape the byte scan does not vouch for: decode it whole.
		return decodeCompletionSlow(body)
	}
	comp := &rollout.Completion{Raw: raw, Usage: resp.Usage}
	resp.Choices[0].fill(&comp.Choice)
	if len(resp.PromptTokenIDs) > 0 && resp.PromptTokenIDs[0] == '[' {
		comp.PromptTokenIDs = resp.PromptTokenIDs
	}
	return comp, nil
}

// decodeCompletionSlow decodes an answer whose message content is not a
// string (content parts) with go-openai's own types.
func decodeCompletionSlow(body []byte) (*rollout.Completion, error) {
	var resp struct {
		Choices        []json.RawMessage `json:"choices"`
		Usage          openai.Usage      `json:"usage"`
		PromptTokenIDs json.RawMessage   `json:"prompt_token_ids"`
	}
	if err := json.Unmarshal(body, &resp); err != nil || len(resp.Choices) == 0 {
		return nil, &GarbageError{Body: quote.Body(body), Err: errNotCompletion}
	}
	comp := &rollout.Completion{Raw: resp.Choices[0], Usage: resp.Usage}
	if err := json.Unmarshal(comp.Raw, &comp.Choice); err != nil || comp.Raw[0] != '{' {
		return nil, &GarbageError{Body: quote.Body(body), Err: errNotCompletion}
	}
	if len(resp.PromptTokenIDs) > 0 && resp.PromptTokenIDs[0] == '[' {
		comp.PromptTokenIDs = resp.PromptTokenIDs
	}
	return comp, nil
}

// rawFirstChoice returns the bytes of the first element of the top-level
// "choices" array of body, which must be valid JSON; nil when there is
// none, it is not an object, or body has another key encoding/json could
// read as "choices" (a duplicate, another case, an escape): the caller
// then leaves the answer to the full decoder, so the bytes kept are always
// those of the choice that was decoded.
func rawFirstChoice(body []byte) []byte {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil
	}
	i++
	var found []byte
	for {
		i = skipSpace(body, i)
		if i >= len(body) || body[i] != '"' {
			return nil
		}
		kEnd := skipValue(body, i)
		key := body[i:kEnd]
		i = skipSpace(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return nil
		}
		i = skipSpace(body, i+1)
		switch {
		case found == nil && string(key) == `"choices"`:
			if found = firstElement(body, i); found == nil {
				return nil
			}
		case bytes.IndexByte(key, '\\') >= 0 || bytes.EqualFold(key, []byte(`"choices"`)):
			return nil
		}
		i = skipSpace(body, skipValue(body, i))
		if i < len(body) && body[i] == '}' {
			return found
		}
		if i >= len(body) || body[i] != ',' {
			return nil
		}
		i++
	}
}

// firstElement returns the first element of the array at b[i] when it is
// an object, else nil.
func firstElement(b []byte, i int) []byte {
	if i >= len(b) || b[i] != '[' {
		return nil
	}
	i = skipSpace(b, i+1)
	if i >= len(b) || b[i] != '{' {
		return nil
	}
	end := skipValue(b, i)
	return b[i:end:end]
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i
			}
		case ',', ':':
			if depth == 0 {
				return i
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// wireChoice is the part of a choice the orchestrator reads. The logprobs
// stay in the raw choice, for the trainer: decoding them into go-openai's
// types would cost more than the rest of the answer.
type wireChoice struct {
	Index        int                 `json:"index"`
	Message      wireMessage         `json:"message"`
	FinishReason openai.FinishReason `json:"finish_reason"`
}

// wireMessage is openai.ChatCompletionMessage with a plain-text content,
// decoded without its UnmarshalJSON (which decodes every message twice
// over).
type wireMessage struct {
	Role             string               `json:"role"`
	Content          string               `json:"content"`
	Refusal          string               `json:"refusal"`
	Name             string               `json:"name"`
	ReasoningContent string               `json:"reasoning_content"`
	FunctionCall     *openai.FunctionCall `json:"function_call"`
	ToolCalls        []openai.ToolCall    `json:"tool_calls"`
	ToolCallID       string               `json:"tool_call_id"`
}

// fill sets ch from the decoded fields.
func (w *wireChoice) fill(ch *openai.ChatCompletionChoice) {
	m := w.Message
	*ch = openai.ChatCompletionChoice{Index: w.Index, FinishReason: w.FinishReason, Message: openai.ChatCompletionMessage{
		Role: m.Role, Content: m.Content, Refusal: m.Refusal, Name: m.Name, ReasoningContent: m.ReasoningContent,
		FunctionCall: m.FunctionCall, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID,
	}}
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
