package rollout_test

import (
	"encoding/json"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

// FuzzDecide feeds the tool-call parser what a model might answer (as the
// JSON of an assistant message): it must not panic, and an accepted call is
// exactly one known tool with arguments that are a JSON object or empty.
func FuzzDecide(f *testing.F) {
	for _, s := range []string{
		`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"eat","arguments":"{}"}}]}`,
		`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"eat","arguments":""}}]}`,
		`{"role":"assistant","tool_calls":[{"function":{"name":"eat","arguments":"[1]"}}]}`,
		`{"role":"assistant","tool_calls":[{"function":{"name":"eat"}},{"function":{"name":"think"}}]}`,
		`{"role":"assistant","content":"<tool_call>{\"name\": \"eat\"}</tool_call>"}`,
		`{"role":"assistant","content":"I think"}`,
		`{"role":"assistant","tool_calls":[{"function":{"name":"rm -rf","arguments":"{\"a\":"}}]}`,
	} {
		f.Add([]byte(s), "length")
		f.Add([]byte(s), "tool_calls")
	}
	f.Fuzz(func(t *testing.T, msgJSON []byte, finish string) {
		var msg rollout.Message
		if json.Unmarshal(msgJSON, &msg) != nil {
			return
		}
		ch := rollout.Choice{Message: msg, FinishReason: finish}
		action, reason := rollout.DecideChoice(&ch)
		if action == rollout.Invalid {
			if reason == "" {
				t.Fatalf("invalid without a reason: %s", msgJSON)
			}
			return
		}
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != action || rollout.ToolIndex(action) < 0 || finish == "length" {
			t.Fatalf("DecideChoice(%s, %q) accepted %q", msgJSON, finish, action)
		}
	})
}

// FuzzParseState feeds the observation parser arbitrary text (the
// scripted test servers read states from conversations): it must not
// panic.
func FuzzParseState(f *testing.F) {
	f.Add("round 1/5 | you are philosopher 0 of 5")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		rollout.ParseState(s)
	})
}
