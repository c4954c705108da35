package refmodel

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/grpo-dev/grpo/rollout"
)

// maxRequestBytes bounds a chat completion request body.
const maxRequestBytes = 16 << 20

// textReply is the content of the plain-text output.
const textReply = "I will consider the forks on either side of me before I act."

// chatRequest is the part of an OpenAI chat completion request the server
// reads. Other fields are accepted and ignored, as vLLM ignores them.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Tools               []toolDef       `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Temperature         *float64        `json:"temperature"`
	Seed                *int64          `json:"seed"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	ChatTemplateKwargs  json.RawMessage `json:"chat_template_kwargs"`
	ReturnTokenIDs      bool            `json:"return_token_ids"`
}

// Response types, shaped as vLLM's.
type (
	chatResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   chatUsage    `json:"usage"`
		// PromptTokenIDs, like each choice's TokenIDs, is sent only when
		// the request sets return_token_ids, as vLLM does.
		PromptTokenIDs []int `json:"prompt_token_ids,omitempty"`
	}
	chatChoice struct {
		Index        int              `json:"index"`
		Message      assistantMessage `json:"message"`
		Logprobs     *choiceLogprobs  `json:"logprobs"`
		FinishReason string           `json:"finish_reason"`
		StopReason   *string          `json:"stop_reason"`
		TokenIDs     []int            `json:"token_ids,omitempty"`
	}
	assistantMessage struct {
		Role      string     `json:"role"`
		Content   *string    `json:"content"`
		ToolCalls []toolCall `json:"tool_calls,omitempty"`
	}
	toolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function functionCall `json:"function"`
	}
	functionCall struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	choiceLogprobs struct {
		Content []tokenLogprob `json:"content"`
	}
	tokenLogprob struct {
		Token       string       `json:"token"`
		Logprob     float64      `json:"logprob"`
		Bytes       []int        `json:"bytes"`
		TopLogprobs []topLogprob `json:"top_logprobs"`
	}
	topLogprob struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	chatUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		TotalTokens      int `json:"total_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
)

// Per-output token strings and their bytes, computed once.
var (
	tokenStrings [NumOutputs]string
	tokenBytes   [NumOutputs][]int
)

func init() {
	for i := range NumOutputs {
		tokenStrings[i] = "token_id:" + strconv.Itoa(TokenID(i))
		text := OutputName(i)
		b := make([]int, len(text))
		for j := range text {
			b[j] = int(text[j])
		}
		tokenBytes[i] = b
	}
}

// completion is a validated request, ready to sample.
type completion struct {
	model       *servedModel
	x           Features
	mask        Mask
	temperature float64
	seed        *int64
	logprobs    bool
	tokenIDs    bool
	top         int
}

// handleChatCompletions serves POST /v1/chat/completions.
func (b *Backend) handleChatCompletions(w http.ResponseWriter, r *http.Request) {
	b.metrics.running.Inc()
	defer b.metrics.running.Dec()

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		re := decodeError(err)
		writeVLLMError(w, http.StatusBadRequest, re.param, re.msg)
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		re := decodeError(err)
		writeVLLMError(w, http.StatusBadRequest, re.param, re.msg)
		return
	}
	c, code, rerr := b.prepare(&req)
	if rerr != nil {
		writeVLLMError(w, code, rerr.param, rerr.msg)
		return
	}

	logp := c.model.policy.LogProbs(&c.x, c.temperature, c.mask)
	u := b.uniform(c.seed)
	a := Pick(&logp, c.temperature, u)
	quirk := b.opts.Strict.quirk(float64(splitmix64(math.Float64bits(u))>>11) / (1 << 53))

	// Prompt tokens are estimated as the request body's bytes / 4, the usual
	// rule of thumb for English text and JSON; a completion is one token.
	prompt := max(1, len(body)/4)
	resp := chatResponse{
		ID:      "chatcmpl-" + randomHex(),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   c.model.name,
		Choices: []chatChoice{{Message: assistantMessage{Role: "assistant"}}},
		Usage:   chatUsage{PromptTokens: prompt, CompletionTokens: 1, TotalTokens: prompt + 1},
	}
	ch := &resp.Choices[0]
	if a == TextOutput {
		text := textReply
		ch.Message.Content = &text
		ch.FinishReason = "stop"
		b.metrics.stop.Inc()
	} else {
		ch.Message.ToolCalls = []toolCall{{
			ID:       "chatcmpl-tool-" + randomHex(),
			Type:     "function",
			Function: functionCall{Name: rollout.ToolNames[a], Arguments: "{}"},
		}}
		ch.FinishReason = "tool_calls"
		b.metrics.toolCalls.Inc()
		applyQuirk(ch, quirk, a)
	}
	if c.logprobs {
		ch.Logprobs = &choiceLogprobs{Content: []tokenLogprob{{
			Token:       tokenStrings[a],
			Logprob:     logp[a],
			Bytes:       tokenBytes[a],
			TopLogprobs: topLogprobs(&logp, c.top),
		}}}
	}
	if c.tokenIDs {
		ch.TokenIDs = []int{TokenID(a)}
		resp.PromptTokenIDs = promptTokenIDs(body)
	}
	b.metrics.promptTokens.Add(float64(prompt))
	b.metrics.genTokens.Inc()
	writeJSON(w, http.StatusOK, &resp)
}

// prepare validates a request and reduces it to what the policy needs. On
// failure it returns the HTTP status and the error.
func (b *Backend) prepare(req *chatRequest) (*completion, int, *requestError) {
	c := &completion{temperature: 1, seed: req.Seed, logprobs: req.Logprobs, tokenIDs: req.ReturnTokenIDs}
	name := req.Model
	if name == "" {
		name = BaseModelName
	}
	c.model = b.models.get(name)
	if c.model == nil {
		return nil, http.StatusNotFound, &requestError{msg: "The model `" + name + "` does not exist."}
	}
	if len(req.Messages) == 0 {
		return nil, http.StatusBadRequest, badField("messages", "at least one message is required")
	}
	if req.Stream {
		return nil, http.StatusBadRequest, badField("stream", "streaming is not supported by the reference backend")
	}
	if req.N != nil && *req.N != 1 {
		return nil, http.StatusBadRequest, badField("n", "%d: only 1 is supported", *req.N)
	}
	if t := req.Temperature; t != nil {
		if *t < 0 || math.IsNaN(*t) {
			return nil, http.StatusBadRequest, badField("temperature", "%v: must be >= 0", *t)
		}
		c.temperature = b.opts.Strict.temperature(*t)
	}
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if f.v != nil && *f.v < 1 {
			return nil, http.StatusBadRequest, badField(f.name, "%d: must be at least 1", *f.v)
		}
	}
	if req.TopLogprobs != nil {
		k := *req.TopLogprobs
		switch {
		case k < 0 || k > 20:
			return nil, http.StatusBadRequest, badField("top_logprobs", "%d: accepted 0 to 20", k)
		case k > 0 && !req.Logprobs:
			return nil, http.StatusBadRequest, badField("top_logprobs", "needs \"logprobs\": true")
		}
		c.top = k
	}
	last := -1
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool":
		default:
			return nil, http.StatusBadRequest, badField("messages["+strconv.Itoa(i)+"].role",
				"%q: accepted system, developer, user, assistant, tool", m.Role)
		}
		if len(m.Content) > 0 && !bytes.ContainsAny(m.Content[:1], "\"[n") {
			return nil, http.StatusBadRequest, badField("messages["+strconv.Itoa(i)+"].content",
				"must be a string, an array of parts or null")
		}
		if m.Role == "user" {
			last = i
		}
	}
	c.x = NoStateFeatures
	if last >= 0 {
		text, err := messageText(req.Messages[last].Content)
		if err != nil {
			return nil, http.StatusBadRequest, badField("messages["+strconv.Itoa(last)+"].content", "%v", err)
		}
		c.x, _ = stateFeatures(text)
	}
	if rerr := b.opts.Strict.checkToolChoice(req); rerr != nil {
		return nil, http.StatusBadRequest, rerr
	}
	mask, rerr := requestMask(req)
	if rerr != nil {
		return nil, http.StatusBadRequest, rerr
	}
	c.mask = mask
	return c, 0, nil
}

// requestMask returns the outputs a request allows: only tools it lists can
// be called; tool_choice "none" (or no tools) allows only text, "required"
// only its tools, and a named function only that tool.
func requestMask(req *chatRequest) (Mask, *requestError) {
	names, err := toolNames(req.Tools)
	if err != nil {
		return 0, badField("tools", "%v", err)
	}
	const text = Mask(1) << TextOutput
	choice := "auto"
	named := ""
	switch tc := bytes.TrimSpace(req.ToolChoice); {
	case len(tc) == 0 || string(tc) == "null":
	case tc[0] == '"':
		if err := json.Unmarshal(tc, &choice); err != nil {
			return 0, badField("tool_choice", "%v", err)
		}
	case tc[0] == '{':
		var v struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := json.Unmarshal(tc, &v); err != nil || v.Type != "function" || v.Function.Name == "" {
			return 0, badField("tool_choice", `want "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
		}
		choice, named = "named", v.Function.Name
	default:
		return 0, badField("tool_choice", `want "auto", "none", "required" or {"type":"function","function":{"name":...}}`)
	}
	switch choice {
	case "none":
		return text, nil
	case "auto":
		if len(names) == 0 {
			return text, nil
		}
		return toolMask(names), nil
	case "required":
		if len(names) == 0 {
			return 0, badField("tool_choice", `"required" needs at least one tool in "tools"`)
		}
		if m := toolMask(names) &^ text; m != 0 {
			return m, nil
		}
		return 0, badField("tools", "none of the tools is one the reference policy can call (%v)", rollout.ToolNames)
	case "named":
		found := false
		for _, n := range names {
			found = found || n == named
		}
		if !found {
			return 0, badField("tool_choice", "function %q is not in \"tools\"", named)
		}
		i := rollout.ToolIndex(named)
		if i < 0 {
			return 0, badField("tool_choice", "function %q is not one the reference policy can call (%v)", named, rollout.ToolNames)
		}
		return 1 << i, nil
	}
	return 0, badField("tool_choice", "%q: accepted auto, none, required or a named function", choice)
}

// topLogprobs lists the k most likely allowed outputs, most likely first.
func topLogprobs(logp *[NumOutputs]float64, k int) []topLogprob {
	out := make([]topLogprob, 0, k)
	var used Mask
	for len(out) < k {
		best := -1
		for o, l := range logp {
			if !used.Has(o) && !math.IsInf(l, -1) && (best < 0 || l > logp[best]) {
				best = o
			}
		}
		if best < 0 {
			break
		}
		used |= 1 << best
		out = append(out, topLogprob{Token: tokenStrings[best], Logprob: logp[best], Bytes: tokenBytes[best]})
	}
	return out
}

// promptTokenIDs stands in for a tokenizer the policy does not need: the
// request body cut into 4-byte pieces (the rule usage.prompt_tokens
// counts by, so there are as many ids as prompt tokens), each piece's id
// its FNV-1a hash modulo tokenBase, below the output tokens' ids. The same
// body always gives the same ids.
func promptTokenIDs(body []byte) []int {
	n := max(1, len(body)/4)
	ids := make([]int, n)
	for i := range ids {
		h := uint32(2166136261)
		for _, c := range body[min(4*i, len(body)):min(4*i+4, len(body))] {
			h = (h ^ uint32(c)) * 16777619
		}
		ids[i] = int(h % tokenBase)
	}
	return ids
}

// uniform returns the sampling draw in [0, 1): a pure function of the
// request's seed when it has one, else the next draw of the server's seeded
// sequence.
func (b *Backend) uniform(seed *int64) float64 {
	var x uint64
	if seed != nil {
		x = splitmix64(uint64(*seed))
	} else {
		x = splitmix64(uint64(b.opts.Seed) ^ b.draws.Add(1)*0x9e3779b97f4a7c15)
	}
	return float64(x>>11) / (1 << 53)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// randomHex returns 32 random hex digits for response and tool call ids.
func randomHex() string {
	var b [16]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}
