package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
)

// Completer sends one chat completion request. Implementations retry
// transient failures themselves; an error returned here is final for the
// call, and the episode that made it is marked errored.
type Completer interface {
	Complete(ctx context.Context, req *Request) (*Completion, error)
}

// EncodedReader is a Completer that reads a request's messages from
// EncodedMessages alone when Messages is empty (an HTTP client, which sends
// those bytes). A Runner then sends it requests without Messages, and its
// conversations keep each message in one form, its JSON: at thousands of
// conversations at once that is most of their memory.
type EncodedReader interface {
	Completer
	ReadsEncodedMessages() bool
}

// readsEncoded reports whether c is an EncodedReader that says so.
func readsEncoded(c Completer) bool {
	er, ok := c.(EncodedReader)
	return ok && er.ReadsEncodedMessages()
}

// Request is a chat completion request. EncodedMessages, when it has one
// entry per message, holds each message's JSON encoding: a conversation
// grows by a few messages per call, so the caller encodes each message once
// and a client can send them without encoding the whole conversation again.
// A Runner leaves Messages empty for an EncodedReader. Temperature is sent
// always (0 is greedy); Seed, when set, asks the server to sample
// reproducibly. Clients for vLLM also ask for the token ids.
type Request struct {
	Model              string
	Messages           []Message
	EncodedMessages    []json.RawMessage
	Tools              []Tool
	ToolChoice         string // auto, required or none; empty is not sent
	Temperature        float32
	TopP               float32
	MaxTokens          int
	LogProbs           bool
	TopLogProbs        int
	Seed               *int
	ChatTemplateKwargs map[string]any
}

// Completion is one sampled choice: parsed (message and finish reason;
// the logprobs stay in Raw only), and exactly as the server returned it
// (with its logprobs and, from vLLM, token_ids), for the trainer.
// PromptTokenIDs is the answer's top-level prompt_token_ids (a JSON
// array), nil when the server sent none. Endpoint is the URL of the
// inference endpoint that answered, when the Completer sends to several
// (inference.Fleet; a failed request's is in its *inference.EndpointError),
// empty otherwise.
type Completion struct {
	Choice         Choice
	Raw            json.RawMessage
	Usage          Usage
	PromptTokenIDs json.RawMessage
	Endpoint       string
}

// Forwarded is the sampled turn as a trainer receives it (DESIGN §5): the
// choice object exactly as returned plus one added key, prompt_token_ids,
// copied from the answer's top level. Without prompt ids it is Raw itself.
// The key is appended inside the object's closing brace, so the choice's
// own bytes are not re-encoded.
func (c *Completion) Forwarded() json.RawMessage {
	raw := bytes.TrimRight(c.Raw, " \t\r\n")
	if len(c.PromptTokenIDs) == 0 || len(raw) < 2 || raw[len(raw)-1] != '}' {
		return c.Raw
	}
	body := bytes.TrimRight(raw[:len(raw)-1], " \t\r\n")
	out := make([]byte, 0, len(raw)+len(c.PromptTokenIDs)+22)
	out = append(out, body...)
	if body[len(body)-1] != '{' {
		out = append(out, ',')
	}
	out = append(out, `"prompt_token_ids":`...)
	out = append(out, c.PromptTokenIDs...)
	return append(out, '}')
}

// DecideChoice is Decide for a sampled choice: a turn the server cut at
// the token limit (finish_reason "length") is invalid whatever it holds,
// since a truncated tool call cannot be trusted.
func DecideChoice(ch *Choice) (action, reason string) {
	if ch.FinishReason == FinishLength {
		return Invalid, "truncated at the token limit (finish_reason length)"
	}
	return Decide(ch.Message)
}

// Decide turns a sampled assistant message into an action: a tool name, or
// Invalid with the reason. Exactly one call of a known tool whose arguments
// are a JSON object (or empty) is valid; anything else — no call, several
// calls, an unknown tool, malformed arguments, or a hermes <tool_call> block
// the server left unparsed in the content — is invalid.
func Decide(msg Message) (action, reason string) {
	switch len(msg.ToolCalls) {
	case 0:
		if strings.Contains(msg.Content, "<tool_call>") {
			return Invalid, "unparsed <tool_call> text in content"
		}
		return Invalid, "no tool call"
	case 1:
	default:
		return Invalid, "several tool calls"
	}
	fn := msg.ToolCalls[0].Function
	if ToolIndex(fn.Name) < 0 {
		return Invalid, "unknown tool " + quoteShort(fn.Name)
	}
	if !validArguments(fn.Arguments) {
		return Invalid, "malformed arguments " + quoteShort(fn.Arguments)
	}
	return fn.Name, ""
}

func validArguments(args string) bool {
	a := bytes.TrimSpace([]byte(args))
	if len(a) == 0 {
		return true
	}
	// A JSON object, checked without decoding it: what unmarshalling into
	// a map would accept, at a fraction of the cost.
	return a[0] == '{' && json.Valid(a)
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
