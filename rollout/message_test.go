package rollout

import (
	"bytes"
	"encoding/json"
	"github.com/grpo-dev/grpo/internal/wordtest"
	"strings"
	"testing"
	"unicode/utf8"

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
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want)
		}
		if n := escapedLen(s); n != len(want)-2 {
			t.Fatalf("escapedLen(%q) = %d, want %d", s, n, len(want)-2)
		}
	})
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

// TestPlainBytes: every byte value, at every position of eight, after
// plain bytes and before anything, against appendString's own rule.
func TestPlainBytes(t *testing.T) {
	wordtest.EveryByte(t, "plainRun", "abcdefgh", func(c byte) bool {
		return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}, func(w []byte) int { return plainRun(string(w), 0) })
}
