package inference

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/jsonvalid"
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
	chatURL string // url + "/chat/completions"
	http    *httpx.Client
	timeout time.Duration
	opts    ChatOptions
	tools   toolCache
	heads   headCache
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

// Complete sends req and returns its first choice.
func (c *ChatClient) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	parts, err := c.encode(req)
	if err != nil {
		return nil, c.wrap(req, 0, err)
	}
	var comp *rollout.Completion
	_, attempts, err := c.http.Do(ctx, &httpx.Request{
		Method: http.MethodPost, URL: c.chatURL, Parts: parts,
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

// encode builds the request body in parts, sent as their concatenation
// (httpx.Request.Parts, never joined into one body buffer held for the
// whole exchange): the scalar fields encoded as
// an object (once per distinct set of parameters, the seed set per call),
// then the messages (each encoded once by the caller when it gave
// EncodedMessages, else here) and the tool list (encoded once per list)
// before its closing brace.
func (c *ChatClient) encode(req *rollout.Request) ([][]byte, error) {
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
	open, err := c.heads.encode(&p)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	var tools []byte
	if len(r.Tools) > 0 {
		tools = c.tools.encode(r.Tools)
	}
	enc := req.EncodedMessages
	if len(r.Messages) > 0 && len(enc) != len(r.Messages) {
		enc = make([]json.RawMessage, len(r.Messages))
		for i := range r.Messages {
			if enc[i], err = json.Marshal(&r.Messages[i]); err != nil {
				return nil, fmt.Errorf("encode message %d: %w", i, err)
			}
		}
	}
	parts := make([][]byte, 0, 2*len(enc)+4)
	parts = append(parts, open)
	for i, m := range enc {
		if i > 0 {
			parts = append(parts, comma)
		}
		parts = append(parts, m)
	}
	if tools != nil {
		parts = append(parts, toolsKey, tools)
	} else {
		parts = append(parts, closeBracket)
	}
	return append(parts, closeBrace), nil
}

var (
	comma        = []byte(",")
	toolsKey     = []byte(`],"tools":`)
	closeBracket = []byte("]")
	closeBrace   = []byte("}")
)

// headCache remembers the encoding of request parameters: every call of a
// run sends the same ones but for the seed. Parameters with maps or
// interfaces other than a string tool choice are encoded every time.
type headCache struct {
	mu    sync.Mutex
	byKey map[headKey]headParts
}

// headKey is the comparable part of chatParams.
type headKey struct {
	Model, ToolChoice, User, ReasoningEffort string
	Temperature, TopP                        float32
	PresencePenalty, FrequencyPenalty        float32
	N, MaxTokens, MaxCompletionTokens        int
	TopLogProbs                              int
	LogProbs, ReturnTokenIDs, Seeded         bool
}

// headParts is an opening split around the seed's value.
type headParts struct{ before, after []byte }

// seedMark is the seed encoded to find where a seed goes: the pattern,
// an unquoted key, cannot occur inside a JSON string.
var seedMarkJSON = []byte(`"seed":` + strconv.Itoa(math.MinInt))

// messagesKey follows the parameters' fields in a request body.
const messagesKey = `,"messages":[`

// encode returns the opening of a request body: p's fields encoded as
// json.Marshal encodes them, without the closing brace, then messagesKey.
func (h *headCache) encode(p *chatParams) ([]byte, error) {
	tc, isString := p.ToolChoice.(string)
	if p.Stop != nil || p.ChatTemplateKwargs != nil || p.ParallelToolCalls != nil || p.ResponseFormat != nil ||
		p.ToolChoice != nil && !isString {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		return append(b[:len(b)-1], messagesKey...), nil
	}
	k := headKey{Model: p.Model, ToolChoice: tc, User: p.User, ReasoningEffort: p.ReasoningEffort,
		Temperature: p.Temperature, TopP: p.TopP, PresencePenalty: p.PresencePenalty, FrequencyPenalty: p.FrequencyPenalty,
		N: p.N, MaxTokens: p.MaxTokens, MaxCompletionTokens: p.MaxCompletionTokens, TopLogProbs: p.TopLogProbs,
		LogProbs: p.LogProbs, ReturnTokenIDs: p.ReturnTokenIDs, Seeded: p.Seed != nil}
	h.mu.Lock()
	hp, ok := h.byKey[k]
	h.mu.Unlock()
	if !ok {
		q := *p
		if q.Seed != nil {
			mark := math.MinInt
			q.Seed = &mark
		}
		b, err := json.Marshal(&q)
		if err != nil {
			return nil, err
		}
		b = append(b[:len(b)-1], messagesKey...)
		hp.before = b
		if q.Seed != nil {
			i := bytes.Index(b, seedMarkJSON) + len(`"seed":`)
			hp.before, hp.after = b[:i:i], b[i+len(seedMarkJSON)-len(`"seed":`):]
		}
		h.mu.Lock()
		if h.byKey == nil || len(h.byKey) > 64 {
			h.byKey = map[headKey]headParts{}
		}
		h.byKey[k] = hp
		h.mu.Unlock()
	}
	if p.Seed == nil {
		return hp.before, nil
	}
	out := make([]byte, 0, len(hp.before)+len(hp.after)+20)
	out = append(out, hp.before...)
	out = strconv.AppendInt(out, int64(*p.Seed), 10)
	return append(out, hp.after...), nil
}

// decodeCompletion reads a chat completion answer: the first choice parsed
// and as received, the usage, and the top-level prompt_token_ids when the
// server returned them.
func decodeCompletion(body []byte) (*rollout.Completion, error) {
	if comp := scanCompletion(body); comp != nil {
		return comp, nil
	}
	return decodeCompletionReflect(body)
}

// scanCompletion reads the common answer — one object holding one choice,
// keys as servers write them — by finding the few values the orchestrator
// reads with a scan that only matches brackets, and decoding just those
// (the message, the usage) with encoding/json: the logprobs and token ids,
// most of a real answer, are only validated, never decoded. It returns nil
// for anything else (invalid JSON, several choices, a duplicate key, a key
// encoding/json would match without case or through an escape, a value of
// another type), which decodeCompletionReflect then reads: the result is
// always what decodeCompletionReflect returns (FuzzScanMatchesReflect).
func scanCompletion(body []byte) *rollout.Completion {
	if !jsonvalid.Valid(body) {
		return nil
	}
	// One pass over the answer: the first choice's members are read where
	// they stand, and the bulk of the answer (logprobs, token ids) is
	// skipped once.
	var first, usage, promptIDs, index, message, finish []byte
	choice := func(key []byte, at int) int {
		switch string(key) {
		case `"index"`:
			return keepOnce(body, at, &index)
		case `"message"`:
			return keepOnce(body, at, &message)
		case `"finish_reason"`:
			return keepOnce(body, at, &finish)
		default:
			if foldsTo(key, choiceKeys) {
				return -1
			}
			return skipValue(body, at)
		}
	}
	end := members(body, skipSpace(body, 0), func(key []byte, at int) int {
		switch string(key) {
		case `"choices"`: // exactly one choice, an object
			i := skipSpace(body, at+1)
			if first != nil || body[at] != '[' || i >= len(body) || body[i] != '{' {
				return -1
			}
			end := members(body, i, choice)
			if end < 0 {
				return -1
			}
			first = body[i:end:end]
			if end = skipSpace(body, end); end >= len(body) || body[end] != ']' {
				return -1
			}
			return end + 1
		case `"usage"`:
			return keepOnce(body, at, &usage)
		case `"prompt_token_ids"`:
			return keepOnce(body, at, &promptIDs)
		default:
			if foldsTo(key, answerKeys) {
				return -1
			}
			return skipValue(body, at)
		}
	})
	if end < 0 || first == nil {
		return nil
	}
	comp := &rollout.Completion{Raw: first}
	if usage != nil && !scanUsage(usage, &comp.Usage) && json.Unmarshal(usage, &comp.Usage) != nil {
		return nil
	}
	if len(promptIDs) > 0 && promptIDs[0] == '[' {
		comp.PromptTokenIDs = promptIDs
	}
	var w wireChoice
	if index != nil && !scanInt(index, &w.Index) && json.Unmarshal(index, &w.Index) != nil ||
		message != nil && !scanMessage(message, &w.Message) && json.Unmarshal(message, &w.Message) != nil ||
		finish != nil && !scanString(finish, (*string)(&w.FinishReason)) {
		return nil
	}
	w.fill(&comp.Choice)
	return comp
}

// keepOnce sets *dst to the value at b[at] and returns the index past it,
// or -1 when *dst was already set (a duplicate key).
func keepOnce(b []byte, at int, dst *[]byte) int {
	if *dst != nil {
		return -1
	}
	end := skipValue(b, at)
	*dst = b[at:end:end]
	return end
}

// The scan* functions read a value of valid JSON as encoding/json reads it
// into a fresh variable of its type, and report false, having set
// nothing that matters, when they cannot vouch for that (the caller then
// asks encoding/json).

// scanString reads a string or null (which leaves s as it is).
func scanString(v []byte, s *string) bool {
	switch {
	case string(v) == "null":
		return true
	case len(v) < 2 || v[0] != '"':
		return false
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		if common, ok := commonStrings[string(in)]; ok {
			*s = common // no allocation
		} else {
			*s = string(in)
		}
		return true
	}
	return json.Unmarshal(v, s) == nil // escapes
}

// commonStrings are the strings nearly every answer holds: its role, the
// tool call's type, the tools' names and empty arguments.
var commonStrings = func() map[string]string {
	m := map[string]string{}
	for _, s := range append([]string{"assistant", "function", "{}", ""}, rollout.ToolNames[:]...) {
		m[s] = s
	}
	return m
}()

// scanInt reads a small non-negative integer or null.
func scanInt(v []byte, n *int) bool {
	if string(v) == "null" {
		return true
	}
	if len(v) == 0 || len(v) > 9 {
		return false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	x, err := strconv.Atoi(string(v))
	*n = x
	return err == nil
}

// scanUsage reads a usage object of the three counts (or null).
func scanUsage(v []byte, u *openai.Usage) bool {
	if string(v) == "null" {
		return true
	}
	var seen [3]bool
	var out openai.Usage
	ok := eachKey(v, 0, func(key, val []byte) bool {
		var i int
		var dst *int
		switch string(key) {
		case `"prompt_tokens"`:
			i, dst = 0, &out.PromptTokens
		case `"completion_tokens"`:
			i, dst = 1, &out.CompletionTokens
		case `"total_tokens"`:
			i, dst = 2, &out.TotalTokens
		default:
			return false // details, or a key matched without case
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		return scanInt(val, dst)
	})
	if ok {
		*u = out
	}
	return ok
}

// scanMessage reads a message of text fields and tool calls.
func scanMessage(v []byte, m *wireMessage) bool {
	if string(v) == "null" {
		return true
	}
	var out wireMessage
	var seen [8]bool
	ok := eachKey(v, 0, func(key, val []byte) bool {
		i, dst := -1, (*string)(nil)
		switch string(key) {
		case `"role"`:
			i, dst = 0, &out.Role
		case `"content"`:
			i, dst = 1, &out.Content
		case `"refusal"`:
			i, dst = 2, &out.Refusal
		case `"name"`:
			i, dst = 3, &out.Name
		case `"reasoning_content"`:
			i, dst = 4, &out.ReasoningContent
		case `"tool_call_id"`:
			i, dst = 5, &out.ToolCallID
		case `"tool_calls"`:
			i = 6
		case `"function_call"`:
			i = 7
		default:
			return !foldsTo(key, messageKeys)
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		switch {
		case i == 7:
			return string(val) == "null" // a legacy call is left to encoding/json
		case dst == nil:
			return scanToolCalls(val, &out.ToolCalls)
		}
		return scanString(val, dst)
	})
	if ok {
		*m = out
	}
	return ok
}

// scanToolCalls reads an array of tool calls without an index (or null).
func scanToolCalls(v []byte, calls *[]openai.ToolCall) bool {
	if string(v) == "null" {
		return true
	}
	if v[0] != '[' {
		return false
	}
	out := []openai.ToolCall{}
	for i := skipSpace(v, 1); i < len(v) && v[i] != ']'; {
		end := skipValue(v, i)
		var tc openai.ToolCall
		var seen [3]bool
		ok := eachKey(v[:end], i, func(key, val []byte) bool {
			var j int
			switch string(key) {
			case `"id"`:
				j = 0
			case `"type"`:
				j = 1
			case `"function"`:
				j = 2
			default:
				return !foldsTo(key, toolCallKeys)
			}
			if seen[j] {
				return false
			}
			seen[j] = true
			switch j {
			case 0:
				return scanString(val, &tc.ID)
			case 1:
				return scanString(val, (*string)(&tc.Type))
			}
			return scanFunction(val, &tc.Function)
		})
		if !ok {
			return false
		}
		out = append(out, tc)
		i = skipSpace(v, end)
		if i < len(v) && v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	*calls = out
	return true
}

// scanFunction reads a tool call's function: name and arguments (or null).
func scanFunction(v []byte, f *openai.FunctionCall) bool {
	if string(v) == "null" {
		return true
	}
	var seenName, seenArgs bool
	return eachKey(v, 0, func(key, val []byte) bool {
		switch string(key) {
		case `"name"`:
			if seenName {
				return false
			}
			seenName = true
			return scanString(val, &f.Name)
		case `"arguments"`:
			if seenArgs {
				return false
			}
			seenArgs = true
			return scanString(val, &f.Arguments)
		default:
			return !foldsTo(key, functionKeys)
		}
	})
}

// eachKey calls f with each key (quoted, as written) and value of the
// object at b[i], which must be valid JSON, until f returns false; it
// returns false then, or when the value at b[i] is not an object or a key
// holds an escape. (It walks the object itself rather than through
// members: a closure's frame less at each level of an answer, on the
// stack of every caller — docs/PERFORMANCE.md, stacks.)
func eachKey(b []byte, i int, f func(key, val []byte) bool) bool {
	i, done := objectStart(b, i)
	for !done {
		key, at := memberAt(b, i)
		if at < 0 {
			return false
		}
		end := skipValue(b, at)
		if !f(key, b[at:end:end]) {
			return false
		}
		i, done = memberEnd(b, end)
	}
	return i >= 0
}

// members calls f with each key (quoted, as written) of the object at
// b[i], which must be valid JSON, and the index of its value; f returns
// the index just past the value (skipValue's, when it does not read it)
// or -1 to stop. members returns the index just past the object, or -1
// when f stopped, the value at b[i] is not an object or a key holds an
// escape.
func members(b []byte, i int, f func(key []byte, at int) int) int {
	i, done := objectStart(b, i)
	for !done {
		key, at := memberAt(b, i)
		if at < 0 {
			return -1
		}
		if i = f(key, at); i < 0 {
			return -1
		}
		i, done = memberEnd(b, i)
	}
	return i
}

// objectStart reads the opening of the object at b[i]: the index of its
// first key, or done with the index past an empty object, or done with -1
// when b[i] does not open an object.
func objectStart(b []byte, i int) (next int, done bool) {
	if i >= len(b) || b[i] != '{' {
		return -1, true
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	return i, false
}

// memberAt reads the key at b[i] (quoted, as written) and returns it with
// the index of its value; at is -1 when b[i] does not start a key, or the
// key holds an escape.
func memberAt(b []byte, i int) (key []byte, at int) {
	if i >= len(b) || b[i] != '"' {
		return nil, -1
	}
	kEnd := skipValue(b, i)
	key = b[i:kEnd]
	if bytes.IndexByte(key, '\\') >= 0 {
		return nil, -1
	}
	i = skipSpace(b, kEnd)
	if i >= len(b) || b[i] != ':' {
		return nil, -1
	}
	return key, skipSpace(b, i+1)
}

// memberEnd reads what follows a member's value, which ends at b[end]:
// the index of the next key, or done with the index past the object's
// end, or done with -1 when neither follows.
func memberEnd(b []byte, end int) (next int, done bool) {
	i := skipSpace(b, end)
	switch {
	case i < len(b) && b[i] == '}':
		return i + 1, true
	case i < len(b) && b[i] == ',':
		return skipSpace(b, i+1), false
	}
	return -1, true
}

// foldsTo reports whether key matches one of names without case, as
// encoding/json matches field names.
func foldsTo(key []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(key, []byte(n)) {
			return true
		}
	}
	return false
}

// The keys the scan reads, quoted, at each level of an answer (package
// variables rather than literal arguments: a call's list of names takes
// room in the frame of every caller — docs/PERFORMANCE.md, stacks).
var (
	answerKeys   = []string{`"choices"`, `"usage"`, `"prompt_token_ids"`}
	choiceKeys   = []string{`"index"`, `"message"`, `"finish_reason"`}
	messageKeys  = []string{`"role"`, `"content"`, `"refusal"`, `"name"`, `"reasoning_content"`, `"function_call"`, `"tool_calls"`, `"tool_call_id"`}
	toolCallKeys = []string{`"id"`, `"type"`, `"function"`, `"index"`}
	functionKeys = []string{`"name"`, `"arguments"`}
)

// decodeCompletionReflect decodes an answer with encoding/json into the
// fields read.
func decodeCompletionReflect(body []byte) (*rollout.Completion, error) {
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
// Inside a container only quotes and brackets matter, found by a table
// lookup a byte: the bulk of an answer (token ids, logprobs) is skipped
// several times faster than by looking at each byte's kind.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		if depth > 0 {
			if i = nextQuoteOrBracket(b, i); i == len(b) {
				break
			}
		}
		switch b[i] {
		case '"':
			i = jsonvalid.StringEnd(b, i) - 1 // the closing quote
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
		case ',', ':', ' ', '\t', '\n', '\r':
			return i // the end of a number or literal (depth 0)
		}
	}
	return i
}

// quoteOrBracket marks the bytes that start or end a string or container.
var quoteOrBracket = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// nextQuoteOrBracket returns the index of the first quote or bracket at
// or after b[i], or len(b). A short run is looked at byte by byte; a long
// one (an array of token ids) is searched in growing windows with
// bytes.IndexByte, which reads many bytes an instruction: the nearest of
// the five in a window is the first.
func nextQuoteOrBracket(b []byte, i int) int {
	for end := min(len(b), i+16); i < end; i++ {
		if quoteOrBracket[b[i]] {
			return i
		}
	}
	for w := 64; i < len(b); w *= 2 {
		win := b[i:min(len(b), i+w)]
		n := len(win)
		for _, q := range [...]byte{']', '"', '}', '[', '{'} {
			if j := bytes.IndexByte(win[:n], q); j >= 0 {
				n = j
			}
		}
		if n < len(win) {
			return i + n
		}
		i += len(win)
	}
	return len(b)
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

// fill sets ch from the decoded fields. Not inlined: the choice it builds
// would take room in scanCompletion's frame while the message is scanned,
// on the stack of every caller (docs/PERFORMANCE.md, stacks).
//
//go:noinline
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
