package inference

import (
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
// keeping each sampled choice exactly as the server returned it. It reads
// answers with go-openai's types, converted to rollout's, but builds and
// sends the HTTP request itself (through httpx), so no client-side
// validation stands between a model name and the server. Transient
// failures (429, 5xx, connection errors, timeouts, bodies that are not a
// completion) are retried by its policy.
type ChatClient struct {
	url     string
	chatURL string // url + "/chat/completions"
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
		url:     baseURL,
		chatURL: baseURL + "/chat/completions",
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

// Complete sends req and returns its first choice. The body is encoded
// for each attempt (httpx.Request.Encode), so that it is not held while
// the answer is awaited.
func (c *ChatClient) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	var comp *rollout.Completion
	_, attempts, err := c.http.Do(ctx, &httpx.Request{
		Method: http.MethodPost, URL: c.chatURL,
		Encode:       func() ([]byte, error) { return c.encode(req) },
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

// ReadsEncodedMessages: a request's EncodedMessages alone are its
// messages when Messages is empty (rollout.EncodedReader).
func (c *ChatClient) ReadsEncodedMessages() bool { return true }

// wrap names the model and the attempts made; the request's URL too,
// unless err already does (a status or connection error says
// "POST URL: ...").
func (c *ChatClient) wrap(req *rollout.Request, attempts int, err error) error {
	if states(err, c.chatURL) {
		return fmt.Errorf("chat completion (model %q, %d attempt(s)): %w", req.Model, attempts, err)
	}
	return fmt.Errorf("chat completion at %s (model %q, %d attempt(s)): %w", c.chatURL, req.Model, attempts, err)
}

// states reports whether err's message already states fact (a URL, a
// model), so that a layer wrapping err does not state it again.
func states(err error, fact string) bool { return strings.Contains(err.Error(), fact) }

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
	Model               string         `json:"model"`
	ToolChoice          string         `json:"tool_choice,omitempty"`
	Temperature         float32        `json:"temperature"`
	TopP                float32        `json:"top_p,omitempty"`
	MaxTokens           int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens int            `json:"max_completion_tokens,omitempty"`
	LogProbs            bool           `json:"logprobs,omitempty"`
	TopLogProbs         int            `json:"top_logprobs,omitempty"`
	Seed                *int           `json:"seed,omitempty"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs,omitempty"`
	ReturnTokenIDs      bool           `json:"return_token_ids,omitempty"`
}

// encode is the request body of req: its parameters encoded by
// json.Marshal, then the messages and the tool list, each already
// encoded by json.Marshal and joined as they are. A message is encoded
// once, when it joins a conversation (the caller's EncodedMessages), and
// a tool list once (toolCache): passed through json.Marshal again, the
// whole conversation would be re-validated every call, which was most of
// the CPU a call cost the client. rollout's messages and tools encode as
// OpenAI's wire format.
func (c *ChatClient) encode(r *rollout.Request) ([]byte, error) {
	p := chatParams{
		Model: r.Model, ToolChoice: r.ToolChoice, Temperature: r.Temperature, TopP: r.TopP,
		MaxTokens: r.MaxTokens, LogProbs: r.LogProbs, TopLogProbs: r.TopLogProbs, Seed: r.Seed,
		ChatTemplateKwargs: r.ChatTemplateKwargs, ReturnTokenIDs: !c.opts.OmitTokenIDs,
	}
	if c.opts.OmitLogprobs {
		p.LogProbs, p.TopLogProbs = false, 0
	}
	if c.opts.MaxCompletionTokens {
		p.MaxCompletionTokens, p.MaxTokens = p.MaxTokens, 0
	}
	head, err := json.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	msgs := r.EncodedMessages
	if len(r.Messages) > 0 && len(msgs) != len(r.Messages) {
		msgs = make([]json.RawMessage, len(r.Messages))
		for i := range r.Messages {
			if msgs[i], err = json.Marshal(&r.Messages[i]); err != nil {
				return nil, fmt.Errorf("encode message %d: %w", i, err)
			}
		}
	}
	var tools []byte
	if len(r.Tools) > 0 {
		tools = c.tools.encode(r.Tools)
	}
	n := len(head) + len(`,"messages":[],"tools":`) + len(tools)
	for _, m := range msgs {
		n += len(m) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, head[:len(head)-1]...) // without its closing brace
	b = append(b, `,"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	b = append(b, ']')
	if tools != nil {
		b = append(b, `,"tools":`...)
		b = append(b, tools...)
	}
	return append(b, '}'), nil
}

// wireAnswer is the part of a chat completion answer the orchestrator
// reads, in go-openai's types. The choices stay as received, for the
// trainer (DESIGN §5).
type wireAnswer struct {
	Choices        []json.RawMessage `json:"choices"`
	Usage          openai.Usage      `json:"usage"`
	PromptTokenIDs json.RawMessage   `json:"prompt_token_ids"`
}

// wireChoice is the part of a choice the orchestrator reads. The logprobs
// stay in the raw choice, for the trainer: decoding them into go-openai's
// types would cost more than the rest of the answer. Index is read only
// to refuse a choice whose index is not a number.
type wireChoice struct {
	Index        int                 `json:"index"`
	Message      wireMessage         `json:"message"`
	FinishReason openai.FinishReason `json:"finish_reason"`
}

// wireMessage is the part of openai.ChatCompletionMessage a rollout.Message
// keeps, decoded without its UnmarshalJSON (which decodes every message
// twice over): the content is a string, null or content parts
// (decodeContent).
type wireMessage struct {
	Role             string            `json:"role"`
	Content          json.RawMessage   `json:"content"`
	Refusal          string            `json:"refusal"`
	ReasoningContent string            `json:"reasoning_content"`
	ToolCalls        []openai.ToolCall `json:"tool_calls"`
	ToolCallID       string            `json:"tool_call_id"`
}

// decodeCompletion reads a chat completion answer: the first choice parsed
// and as received, the usage, and the top-level prompt_token_ids when the
// server returned them. Anything else is a GarbageError.
func decodeCompletion(body []byte) (*rollout.Completion, error) {
	var a wireAnswer
	var w wireChoice
	if json.Unmarshal(body, &a) != nil || len(a.Choices) == 0 || a.Choices[0][0] != '{' ||
		json.Unmarshal(a.Choices[0], &w) != nil {
		return nil, &GarbageError{Body: quote.Body(body), Err: errNotCompletion}
	}
	m := w.Message
	comp := &rollout.Completion{Raw: a.Choices[0],
		Usage: rollout.Usage{PromptTokens: a.Usage.PromptTokens, CompletionTokens: a.Usage.CompletionTokens},
		Choice: rollout.Choice{FinishReason: string(w.FinishReason), Message: rollout.Message{
			Role: m.Role, Refusal: m.Refusal, ReasoningContent: m.ReasoningContent,
			ToolCalls: toolCalls(m.ToolCalls), ToolCallID: m.ToolCallID,
		}}}
	if !decodeContent(m.Content, &comp.Choice.Message) {
		return nil, &GarbageError{Body: quote.Body(body), Err: errNotCompletion}
	}
	if len(a.PromptTokenIDs) > 0 && a.PromptTokenIDs[0] == '[' {
		comp.PromptTokenIDs = a.PromptTokenIDs
	}
	return comp, nil
}

// toolCalls is calls in rollout's terms.
func toolCalls(calls []openai.ToolCall) []rollout.ToolCall {
	if calls == nil {
		return nil
	}
	out := make([]rollout.ToolCall, len(calls))
	for i, tc := range calls {
		out[i] = rollout.ToolCall{ID: tc.ID, Type: string(tc.Type),
			Function: rollout.FunctionCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}}
	}
	return out
}

// decodeContent sets msg's content from a message's "content" value: a
// string, content parts, or null or absent (no content). It reports
// false for anything else.
func decodeContent(v json.RawMessage, msg *rollout.Message) bool {
	switch {
	case len(v) == 0 || string(v) == "null":
		return true
	case v[0] == '"':
		return json.Unmarshal(v, &msg.Content) == nil
	case v[0] == '[':
		var parts []openai.ChatMessagePart
		if json.Unmarshal(v, &parts) != nil {
			return false
		}
		msg.ContentParts = make([]rollout.ContentPart, len(parts))
		for i, p := range parts {
			msg.ContentParts[i] = rollout.ContentPart{Type: string(p.Type), Text: p.Text}
		}
		return true
	}
	return false
}

// toolCache remembers the encoding of tool lists by identity: callers pass
// the same slice on every call.
type toolCache struct {
	mu   sync.Mutex
	byID map[*rollout.Tool][]byte
}

func (t *toolCache) encode(tools []rollout.Tool) []byte {
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
		t.byID = map[*rollout.Tool][]byte{}
	}
	t.byID[&tools[0]] = b
	return b
}
