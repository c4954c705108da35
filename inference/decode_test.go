package inference

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

// TestDecodeCompletion: the answers servers send — vLLM's with its null
// fields, logprobs and token ids, plain text, content parts, keys in
// another case — are read into the choice, usage and prompt token ids,
// the first choice kept byte for byte; what is not a completion is a
// GarbageError.
func TestDecodeCompletion(t *testing.T) {
	eat := []rollout.ToolCall{{ID: "t", Type: "function", Function: rollout.FunctionCall{Name: "eat", Arguments: "{}"}}}
	for _, tt := range []struct {
		name, body string
		raw        string // the first choice as received
		want       rollout.Choice
		usage      rollout.Usage
		ids        string
	}{
		{
			name:  "vLLM",
			body:  `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"eat","arguments":"{}"}}],"reasoning_content":null},"logprobs":{"content":[{"token":"token_id:5","logprob":-0.25}]},"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8,"prompt_tokens_details":null},"prompt_token_ids":[1,2]}`,
			raw:   `{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"eat","arguments":"{}"}}],"reasoning_content":null},"logprobs":{"content":[{"token":"token_id:5","logprob":-0.25}]},"finish_reason":"tool_calls","stop_reason":null}`,
			want:  rollout.Choice{Message: rollout.Message{Role: "assistant", ToolCalls: eat}, FinishReason: "tool_calls"},
			usage: rollout.Usage{PromptTokens: 7, CompletionTokens: 1},
			ids:   `[1,2]`,
		},
		{
			name: "text, two choices, spaces",
			body: ` { "choices" : [ {"index":0,"message":{"role":"assistant","content":"hi \"you\"","reasoning_content":"r"},"finish_reason":"stop"} , {"index":1} ] } `,
			raw:  `{"index":0,"message":{"role":"assistant","content":"hi \"you\"","reasoning_content":"r"},"finish_reason":"stop"}`,
			want: rollout.Choice{Message: rollout.Message{Role: "assistant", Content: `hi "you"`, ReasoningContent: "r"}, FinishReason: "stop"},
		},
		{
			name: "content parts",
			body: `{"choices":[{"message":{"role":"assistant","content":[{"type":"text","text":"a"}]}}],"prompt_token_ids":null}`,
			raw:  `{"message":{"role":"assistant","content":[{"type":"text","text":"a"}]}}`,
			want: rollout.Choice{Message: rollout.Message{Role: "assistant", ContentParts: []rollout.ContentPart{{Type: "text", Text: "a"}}}},
		},
		{
			name:  "keys in another case",
			body:  `{"Choices":[{"Message":{"Role":"assistant","Content":"x"}}],"USAGE":{"prompt_tokens":2}}`,
			raw:   `{"Message":{"Role":"assistant","Content":"x"}}`,
			want:  rollout.Choice{Message: rollout.Message{Role: "assistant", Content: "x"}},
			usage: rollout.Usage{PromptTokens: 2},
		},
	} {
		c, err := decodeCompletion([]byte(tt.body))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(c.Raw) != tt.raw || fmt.Sprint(c.Choice) != fmt.Sprint(tt.want) || c.Usage != tt.usage || string(c.PromptTokenIDs) != tt.ids {
			t.Errorf("%s:\n got raw %s choice %+v usage %+v ids %s\nwant raw %s choice %+v usage %+v ids %s",
				tt.name, c.Raw, c.Choice, c.Usage, c.PromptTokenIDs, tt.raw, tt.want, tt.usage, tt.ids)
		}
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{}`, `{"choices":[]}`, `{"choices":[1]}`, `{"choices":[null]}`,
		`{"choices":[{"message":{"content":5}}]}`, `{"choices":[{"index":"0"}]}`,
		`{"choices":[{}],"usage":{"prompt_tokens":"x"}}`, `{"choices":[{}]} x`, `<html>502</html>`,
	} {
		_, err := decodeCompletion([]byte(bad))
		var ge *GarbageError
		if !errors.As(err, &ge) || !errors.Is(err, errNotCompletion) {
			t.Errorf("decodeCompletion(%q): error %v, want a GarbageError", bad, err)
		}
	}
}

// vllmLikeAnswerWith is an answer of the size vLLM returns for a tool
// call with logprobs and token ids: 24 sampled tokens, promptIDs prompt
// token ids (vLLM returns them when asked for token ids, as the trainer
// needs them).
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

// BenchmarkDecodeCompletion: the answer decoding of every call, on the
// bench's fake answer and on vLLM-sized answers after a prompt of 700 and
// of 3,000 tokens.
func BenchmarkDecodeCompletion(b *testing.B) {
	small := []byte(okCompletion)
	for _, n := range []int{0, 700, 3000} {
		answer := small
		if n > 0 {
			answer = vllmLikeAnswerWith(n)
		}
		if _, err := decodeCompletion(answer); err != nil {
			b.Fatal(err)
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
