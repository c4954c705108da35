package inference

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// FuzzScanMatchesReflect: whenever scanCompletion reads an answer, it
// reads exactly what the encoding/json decoder reads, the raw choice's
// bytes included.
func FuzzScanMatchesReflect(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"eat","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:1","logprob":-0.1,"bytes":[60],"top_logprobs":[]}]},"finish_reason":"tool_calls","token_ids":[1]}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8},"prompt_token_ids":[1,2,3]}`,
		` { "choices" : [ { "message" : { "content" : "a\"}" } , "Index" : 1 } ] } `,
		`{"choices":[{"index":1.5}]}`,
		`{"choices":[{"message":{"content":[{"type":"text","text":"a"}]}}],"usage":null}`,
		`{"choices":[{}],"choices":[{"index":2}]}`,
		`{"Usage":{"prompt_tokens":1},"choices":[{"finish_reason":null}]}`,
		`{"choices":[{"message":{}},{"message":{}}]}`,
		`{"ch\u006fices":[{}]}`,
		`{"choices":[]}`,
		`{"prompt_token_ids":null,"choices":[{"index":0}]}`,
		`{"choices":[{"message":{"role":"assistant","content":"a\u00e9\n\"","reasoning_content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"eat","arguments":"{\"x\":1}"}},{"id":"2","function":null}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"total_tokens":2}}`,
		`{"choices":[{"message":{"tool_calls":[]}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"index":0,"id":"1"}]}}]}`,
		`{"choices":[{"message":{"tool_calls":[null]}}]}`,
		`{"choices":[{"message":{"Role":"x"}}]}`,
		`{"choices":[{"message":{"role":"a","role":"b"}}]}`,
		"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}",
		`{"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":1}},"choices":[{}]}`,
		`{"usage":{"prompt_tokens":1,"prompt_tokens":2},"choices":[{"index":-1}]}`,
		`{"choices":[{"message":{"function_call":{"name":"eat"},"tool_calls":[{"function":{"name":"a","Name":"b"}}]}}]}`,
		`{"choices":[{"message":{"function_call":null,"function_call":null}}]}`,
		`{"choices":[{"message":{"function_call":null,"content":"x"}}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Add(vllmLikeAnswer())
	f.Fuzz(func(t *testing.T, body []byte) {
		scan := scanCompletion(body)
		if scan == nil {
			return
		}
		ref, err := decodeCompletionReflect(body)
		if err != nil {
			t.Fatalf("scan read %s, the decoder refuses it: %v", body, err)
		}
		if !bytes.Equal(scan.Raw, ref.Raw) || !bytes.Equal(scan.PromptTokenIDs, ref.PromptTokenIDs) ||
			!reflect.DeepEqual(scan.Usage, ref.Usage) || !reflect.DeepEqual(scan.Choice, ref.Choice) {
			t.Fatalf("on %s\nscan    %+v\ndecoder %+v", body, scan, ref)
		}
	})
}

// TestScanCompletionReadsTheCommonAnswer: the answer servers send is read
// by the scan, not left to the decoder; the unusual ones are left to it.
func TestScanCompletionReadsTheCommonAnswer(t *testing.T) {
	body := []byte(`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"t","type":"function","function":{"name":"eat","arguments":"{}"}}]},"logprobs":{"content":[]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8},"prompt_token_ids":[1,2]}`)
	c := scanCompletion(body)
	if c == nil {
		t.Fatal("scanCompletion left the common answer to the decoder")
	}
	if got := c.Choice.Message.ToolCalls; len(got) != 1 || got[0].Function.Name != "eat" || c.Choice.FinishReason != "tool_calls" ||
		c.Usage.PromptTokens != 7 || c.Usage.TotalTokens != 8 || string(c.PromptTokenIDs) != "[1,2]" ||
		!strings.HasPrefix(string(c.Raw), `{"index":0,`) || !strings.HasSuffix(string(c.Raw), `"finish_reason":"tool_calls"}`) {
		t.Fatalf("scanCompletion: %+v", c)
	}
	for _, odd := range []string{
		`{"choices":[{"index":0},{"index":1}]}`,    // two choices
		`{"choices":[{"Index":0}]}`,                // a key matched without case
		`{"choices":[{"index":0}],"choices":[]}`,   // a duplicate
		`{"choices":[{"message":{"content":[]}}]}`, // content parts
		`{"choices":[{"index":0}]} x`,              // not JSON
	} {
		if scanCompletion([]byte(odd)) != nil {
			t.Errorf("scanCompletion read %s; want it left to the decoder", odd)
		}
	}
}

// vllmLikeAnswer is an answer of the size vLLM returns for a tool call
// with logprobs and token ids: 24 sampled tokens, 700 prompt tokens.
func vllmLikeAnswer() []byte { return vllmLikeAnswerWith(700) }

// vllmLikeAnswerWith is vllmLikeAnswer with promptIDs prompt token ids.
func vllmLikeAnswerWith(promptIDs int) []byte {
	var lp, ids strings.Builder
	for i := range 24 {
		if i > 0 {
			lp.WriteByte(',')
		}
		fmt.Fprintf(&lp, `{"token":"token_id:%d","logprob":-0.%04d,"bytes":[%d,%d],"top_logprobs":[]}`, 1000+i, 17*i+3, 60+i, 101)
	}
	for i := range promptIDs {
		if i > 0 {
			ids.WriteByte(',')
		}
		fmt.Fprint(&ids, 151000+i*37%900)
	}
	return fmt.Appendf(nil, `{"id":"chatcmpl-8c1d","object":"chat.completion","created":1764567890,"model":"policy","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"chatcmpl-tool-4b2a","type":"function","function":{"name":"pick_up_left","arguments":"{}"}}],"reasoning_content":null},"logprobs":{"content":[%s]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[1,2,3]}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":24,"prompt_tokens_details":null},"prompt_logprobs":null,"prompt_token_ids":[%s],"kv_transfer_params":null}`, lp.String(), promptIDs, promptIDs+24, ids.String())
}

// BenchmarkDecodeCompletion: the answer decoding of every call, on
// vLLM-sized answers: 24 sampled tokens with logprobs after a prompt of
// 700 and of 3,000 tokens (vLLM returns the prompt's ids when asked for
// token ids, as the trainer needs them).
func BenchmarkDecodeCompletion(b *testing.B) {
	// The bench's fake answer: one tool call, three sampled tokens with
	// logprobs, eight prompt token ids (650 bytes).
	small := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"think","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:151657","logprob":-0.1,"bytes":[60],"top_logprobs":[]},{"token":"token_id:5","logprob":-0.2,"bytes":[116],"top_logprobs":[]},{"token":"token_id:151658","logprob":-0.01,"bytes":[62],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[151657,5,151658]}],"usage":{"prompt_tokens":700,"completion_tokens":3,"total_tokens":703},"prompt_token_ids":[1,2,3,4,5,6,7,8]}`)
	for _, n := range []int{0, 700, 3000} {
		answer := small
		if n > 0 {
			answer = vllmLikeAnswerWith(n)
		}
		if _, err := decodeCompletion(answer); err != nil {
			b.Fatal(err)
		}
		if scanCompletion(answer) == nil {
			b.Fatal("the vLLM-like answer is not read by the scan")
		}
		b.Run(fmt.Sprintf("prompt=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			b.ReportAllocs()
			for b.Loop() {
				decodeCompletion(answer)
			}
		})
	}
}

// TestScanMessageReadsVLLMNulls: the null fields vLLM writes in every
// message are read by the scan itself, without encoding/json.
func TestScanMessageReadsVLLMNulls(t *testing.T) {
	var m wireMessage
	msg := `{"role":"assistant","content":null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"eat","arguments":"{}"}}],"reasoning_content":null}`
	if !scanMessage([]byte(msg), &m) || m.Role != "assistant" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "eat" {
		t.Fatalf("scanMessage(%s) = %+v", msg, m)
	}
	if scanMessage([]byte(`{"function_call":{"name":"eat"}}`), &m) {
		t.Fatal("a legacy function call was read by the scan; encoding/json must read it")
	}
}
