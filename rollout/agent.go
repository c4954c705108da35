package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// Completer sends one chat completion request. Implementations retry
// transient failures themselves; an error returned here is final for the
// call, and the episode that made it is marked errored.
type Completer interface {
	Complete(ctx context.Context, req *Request) (*Completion, error)
}

// Request is a chat completion request. EncodedMessages, when it has one
// entry per message, holds each message's JSON encoding: a conversation
// grows by a few messages per call, so the caller encodes each message once
// and a client can send them without encoding the whole conversation again.
type Request struct {
	openai.ChatCompletionRequest
	EncodedMessages []json.RawMessage
}

// Completion is one sampled choice: parsed, and exactly as the server
// returned it (with its logprobs), for the trainer.
type Completion struct {
	Choice openai.ChatCompletionChoice
	Raw    json.RawMessage
	Usage  openai.Usage
}

// Decide turns a sampled assistant message into an action: a tool name, or
// Invalid with the reason. Exactly one call of a known tool whose arguments
// are a JSON object (or empty) is valid; anything else — no call, several
// calls, an unknown tool, malformed arguments, or a hermes <tool_call> block
// the server left unparsed in the content — is invalid.
func Decide(msg openai.ChatCompletionMessage) (action, reason string) {
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
	if a[0] != '{' {
		return false
	}
	var v map[string]json.RawMessage
	return json.Unmarshal(a, &v) == nil
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}
