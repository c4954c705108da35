package inference

import (
	"encoding/json"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/grpo-dev/grpo/rollout"
)

// The JSON of rollout's messages and tools is what requests send and what
// transcripts and trainer jobs store (DESIGN §5). These tests hold it to
// go-openai's encoding of the same values, the encoding those bytes have
// always had: a difference would change what servers receive and what is
// on disk.

// sameJSON fails unless got and want encode to the same bytes.
func sameJSON(t *testing.T, name string, got, want any) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("%s: encode rollout's: %v", name, err)
	}
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatalf("%s: encode go-openai's: %v", name, err)
	}
	if string(g) != string(w) {
		t.Errorf("%s:\n rollout   %s\n go-openai %s", name, g, w)
	}
}

// TestMessagesEncodeAsGoOpenAI: the messages an episode writes (system,
// observation, tool result, the note standing in for a dropped answer)
// and assistant turns of every shape encode as go-openai encodes them.
func TestMessagesEncodeAsGoOpenAI(t *testing.T) {
	text := `round 1/5 | "quoted" <b>&amp; é 😀` + "\n\ttab"
	for _, tt := range []struct {
		name string
		msg  rollout.Message
		want openai.ChatCompletionMessage
	}{
		{"system", rollout.Message{Role: rollout.RoleSystem, Content: text},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: text}},
		{"user", rollout.Message{Role: rollout.RoleUser, Content: text},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text}},
		{"user, empty content", rollout.Message{Role: rollout.RoleUser},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser}},
		{"tool result", rollout.Message{Role: rollout.RoleTool, ToolCallID: "chatcmpl-tool-1", Content: "ok: you ate"},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "chatcmpl-tool-1", Content: "ok: you ate"}},
		{"assistant note", rollout.Message{Role: rollout.RoleAssistant, Content: "[answer of 70000 bytes dropped: over the 65536-byte cap]"},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "[answer of 70000 bytes dropped: over the 65536-byte cap]"}},
		{"assistant, empty", rollout.Message{Role: rollout.RoleAssistant},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant}},
		{"assistant with tool calls",
			rollout.Message{Role: rollout.RoleAssistant, ReasoningContent: "hmm", ToolCalls: []rollout.ToolCall{
				{ID: "c1", Type: "function", Function: rollout.FunctionCall{Name: rollout.Eat, Arguments: `{"a": "<b>"}`}},
				{Type: "function", Function: rollout.FunctionCall{Name: rollout.Think}},
				{},
			}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ReasoningContent: "hmm", ToolCalls: []openai.ToolCall{
				{ID: "c1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: rollout.Eat, Arguments: `{"a": "<b>"}`}},
				{Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: rollout.Think}},
				{},
			}}},
		{"assistant, text and refusal", rollout.Message{Role: rollout.RoleAssistant, Content: "<tool_call>", Refusal: "no"},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "<tool_call>", Refusal: "no"}},
		{"assistant, content parts",
			rollout.Message{Role: rollout.RoleAssistant, Refusal: "no", ReasoningContent: "r",
				ContentParts: []rollout.ContentPart{{Type: "text", Text: "a"}, {Text: "b"}}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Refusal: "no", ReasoningContent: "r",
				MultiContent: []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: "a"}, {Text: "b"}}}},
		{"assistant, no parts", rollout.Message{Role: rollout.RoleAssistant, ContentParts: []rollout.ContentPart{}},
			openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, MultiContent: []openai.ChatMessagePart{}}},
	} {
		sameJSON(t, tt.name, tt.msg, tt.want)
		sameJSON(t, tt.name+" (pointer)", &tt.msg, &tt.want)
	}
}

// TestAnswersEncodeAsGoOpenAI: an assistant turn as servers send it,
// decoded by the client and encoded again for the next request, has the
// bytes go-openai gives the same message.
func TestAnswersEncodeAsGoOpenAI(t *testing.T) {
	for _, msg := range []string{
		`{"role":"assistant","content":null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"chatcmpl-tool-4b2a","type":"function","function":{"name":"pick_up_left","arguments":"{}"}}],"reasoning_content":null}`,
		`{"role":"assistant","content":"<tool_call>{\"name\": \"eat\"}</tool_call>","reasoning_content":"r \u003c & é"}`,
		`{"role":"assistant","content":"","tool_calls":[{"id":"a","type":"function","function":{"name":"eat","arguments":""}},{"type":"function","function":{"name":"think"}}]}`,
		`{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`,
		`{"role":"assistant","content":[]}`,
		`{"role":"assistant","refusal":"I won't","content":null,"tool_calls":[]}`,
		`{"role":"assistant"}`,
	} {
		c, err := decodeCompletion([]byte(`{"choices":[{"index":0,"message":` + msg + `,"finish_reason":"stop"}]}`))
		if err != nil {
			t.Fatalf("%s: %v", msg, err)
		}
		var want openai.ChatCompletionMessage
		if err := json.Unmarshal([]byte(msg), &want); err != nil {
			t.Fatalf("%s: go-openai: %v", msg, err)
		}
		sameJSON(t, msg, c.Choice.Message, want)
	}
}

// TestToolsEncodeAsGoOpenAI: the tool list requests and trainer jobs
// carry encodes as go-openai encodes the same tools.
func TestToolsEncodeAsGoOpenAI(t *testing.T) {
	tools := rollout.Tools()
	want := make([]openai.Tool, len(tools))
	for i, tl := range tools {
		want[i] = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: tl.Function.Name, Description: tl.Function.Description, Parameters: tl.Function.Parameters,
		}}
	}
	sameJSON(t, "rollout.Tools", tools, want)
	sameJSON(t, "rollout.ToolsJSON", rollout.ToolsJSON(), want)
	sameJSON(t, "no parameters", rollout.Tool{Type: "function", Function: rollout.Function{Name: "x"}},
		openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "x"}})
}
