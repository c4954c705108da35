package rollout

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// TestEncodeMessageMatchesJSONMarshal checks the hand encoder against
// encoding/json on the messages episodes build and on awkward text.
func TestEncodeMessageMatchesJSONMarshal(t *testing.T) {
	idx := 0
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: SystemPrompt(DefaultEnvConfig(), 3)},
		{Role: openai.ChatMessageRoleUser, Content: "Round 1.\nstate: {\"round\":1,\"a\":\"<b>&\"}"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "think", Arguments: "{}"}}}},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{Type: "function", Function: openai.FunctionCall{Arguments: ""}}, {ID: "x", Type: "function", Function: openai.FunctionCall{Name: "eat"}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c1", Content: "ok"},
		{Role: openai.ChatMessageRoleAssistant, Content: "<tool_call>\t\"\\\b\f\r\x01\x1f\u2028\u2029 é 日本 \xff\xfe end"},
		{Role: openai.ChatMessageRoleAssistant, Content: "x", Name: "n", ReasoningContent: "r"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{Index: &idx, ID: "i", Type: "function"}}},
		{Role: ""},
	}
	for i, m := range msgs {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeMessage(&m); !bytes.Equal(got, want) {
			t.Errorf("message %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("plain")
	f.Add("<tool_call>\u2028\xff\"\\\n")
	f.Fuzz(checkAppendString)
}

// checkAppendString: s is encoded and sized as encoding/json encodes it.
func checkAppendString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := appendString(nil, s); !bytes.Equal(got, want) {
		t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
	}
	if n := escapedLen(s); n != len(want)-2 {
		t.Fatalf("escapedLen(%q) = %d, want %d", s, n, len(want)-2)
	}
}

// TestEncodeMessageSizesExactly: an observation (whose state line is JSON,
// quotes escaped) is encoded into a buffer of its own size, not one grown
// past it; conversations keep these buffers for the whole episode.
func TestEncodeMessageSizesExactly(t *testing.T) {
	s := State{Round: 2, Rounds: 5, ID: 1, N: 5, Last: &LastEvent{Action: "eat", OK: true}}
	for _, m := range []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: Observation(s)},
		{Role: openai.ChatMessageRoleAssistant, Content: "<&>\u2028\xff\x01\"\n", ToolCalls: []openai.ToolCall{{ID: "c1", Type: "function", Function: openai.FunctionCall{Name: "eat", Arguments: `{"a":"<b>"}`}}}},
	} {
		b := encodeMessage(&m)
		if want, _ := json.Marshal(m); !bytes.Equal(b, want) {
			t.Fatalf("encodeMessage = %s, want %s", b, want)
		}
		if cap(b) > len(b)+96 {
			t.Errorf("%s message: %d bytes in a buffer of %d", m.Role, len(b), cap(b))
		}
	}
}

// TestValidArgumentsAsUnmarshal: the argument check accepts exactly what
// decoding into a map of raw values accepts.
func TestValidArgumentsAsUnmarshal(t *testing.T) {
	for _, a := range []string{
		"", " ", "{}", " {}\n", `{"a":1}`, `{"a":{"b":[1,2]}}`, `{"a":}`, `{"a":1,}`,
		"[]", "null", `"x"`, "{} {}", `{"a":1}x`, "{", "}", `{"a":"` + "\xff" + `"}`,
		`{"a":1,"a":2}`, "{\t}", `{"\u0000":0}`, `{"a" 1}`,
	} {
		var v map[string]json.RawMessage
		trimmed := strings.TrimSpace(a)
		want := trimmed == "" || trimmed[0] == '{' && json.Unmarshal([]byte(trimmed), &v) == nil
		if got := validArguments(a); got != want {
			t.Errorf("validArguments(%q) = %v, want %v", a, got, want)
		}
	}
}

// TestAppendStringEveryByte: every byte value, alone, between plain bytes
// and in a run, is encoded and sized as encoding/json encodes it.
func TestAppendStringEveryByte(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := string([]byte{byte(c)})
		for _, s := range []string{b, "ab" + b + "cd", strings.Repeat(b, 9)} {
			checkAppendString(t, s)
		}
	}
}

// BenchmarkEncodeMessage: an observation (prose, then its state line as
// JSON, quotes escaped) and a system prompt (prose).
func BenchmarkEncodeMessage(b *testing.B) {
	obs := Observation(State{Round: 2, Rounds: 5, ID: 1, N: 5, Last: &LastEvent{Action: "eat", OK: true}})
	sys := "You are philosopher 0 at a round table of 5 philosophers (ids 0 to 4). Fork 0 is on your left and fork 1 on your right; each fork is shared with a neighbour. The dinner lasts 5 rounds. Each round all philosophers decide at the same time on the same view of the table; put-downs happen first, then eating, then pick-ups (if two neighbours reach for the same free fork, one of them gets it at random). Every round you must call exactly one tool: pick_up_left, pick_up_right, put_down_left, put_down_right, eat or think."
	for _, c := range []struct{ name, s string }{{"observation", obs}, {"prose", sys}} {
		m := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: c.s}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.s)))
			b.ReportAllocs()
			for b.Loop() {
				encodeMessage(&m)
			}
		})
	}
}
