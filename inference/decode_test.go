package inference

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestRawFirstChoice finds the first choice's exact bytes wherever
// "choices" sits and whatever precedes it.
func TestRawFirstChoice(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"choices":[{"a":1}]}`, `{"a":1}`},
		{` { "id" : "x\"],{" , "n":[1,{"b":[2]}], "t":true, "f":-1.5e3, "choices" : [ {"m":{"c":"}]\\"},"l":[]} , {"z":2}]}`, `{"m":{"c":"}]\\"},"l":[]}`},
		{`{"usage":{},"choices":[]}`, ``},
		{`{"choices":[1]}`, ``},
		{`{"choices":{"a":1}}`, ``},
		{`{"other":null}`, ``},
		{`[]`, ``},
	} {
		if got := rawFirstChoice([]byte(tc.body)); string(got) != tc.want {
			t.Errorf("rawFirstChoice(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

// FuzzDecodeFastMatchesSlow checks the fast decoder against go-openai's types
// on any answer both accept.
func FuzzDecodeFastMatchesSlow(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"1","type":"function","function":{"name":"eat","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:1","logprob":-1,"bytes":[1]}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":3},"prompt_token_ids":[1,2]}`))
	f.Add([]byte(`{"id":"x","choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"a"}]}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fast, ferr := decodeCompletion(body)
		slow, serr := decodeCompletionSlow(body)
		stripped := false
		if ferr == nil && serr != nil {
			// Logprobs are forwarded raw, never decoded, so the fast
			// decoder may accept a body that go-openai's types refuse
			// only for its logprobs: compare without them.
			if b, ok := withoutLogprobs(body); ok {
				slow, serr = decodeCompletionSlow(b)
				stripped = true
			}
		}
		if (ferr == nil) != (serr == nil) {
			t.Fatalf("fast err %v, slow err %v on %s", ferr, serr, body)
		}
		if ferr != nil {
			return
		}
		var a, b any
		if !stripped && (json.Unmarshal(fast.Raw, &a) != nil || json.Unmarshal(slow.Raw, &b) != nil || !reflect.DeepEqual(a, b)) {
			t.Fatalf("raw %s vs %s", fast.Raw, slow.Raw)
		}
		fast.Choice.LogProbs, slow.Choice.LogProbs = nil, nil
		if !reflect.DeepEqual(fast.Choice, slow.Choice) || fast.Usage != slow.Usage || !bytes.Equal(fast.PromptTokenIDs, slow.PromptTokenIDs) {
			t.Fatalf("fast %+v, slow %+v on %s", fast, slow, body)
		}
	})
}

// withoutLogprobs returns body with every choice's logprobs removed (keys
// matched without case, as encoding/json matches them); false when body is
// not an object whose choices are objects.
func withoutLogprobs(body []byte) ([]byte, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return nil, false
	}
	for k, v := range top {
		if !strings.EqualFold(k, "choices") {
			continue
		}
		var choices []map[string]json.RawMessage
		if json.Unmarshal(v, &choices) != nil {
			return nil, false
		}
		for _, c := range choices {
			for ck := range c {
				if strings.EqualFold(ck, "logprobs") {
					delete(c, ck)
				}
			}
		}
		b, err := json.Marshal(choices)
		if err != nil {
			return nil, false
		}
		top[k] = b
	}
	out, err := json.Marshal(top)
	return out, err == nil
}
