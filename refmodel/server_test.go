package refmodel

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
)

func chatBody(model string, s rollout.State, extra map[string]any) map[string]any {
	body := map[string]any{
		"model":    model,
		"messages": conversation(s),
		"tools":    rollout.Tools(),
		"logprobs": true,
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// chat posts a completion request and decodes the response.
func chat(t *testing.T, url string, body any) (int, openai.ChatCompletionResponse, []byte) {
	t.Helper()
	code, raw := do(t, http.MethodPost, url+"/v1/chat/completions", body)
	var resp openai.ChatCompletionResponse
	if code == http.StatusOK {
		if err := json.Unmarshal(raw, &resp); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	return code, resp, raw
}

// sampled returns the output a response chose and its reported logprob.
func sampled(t *testing.T, resp openai.ChatCompletionResponse) (int, float64) {
	t.Helper()
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	c := resp.Choices[0]
	a := TextOutput
	switch {
	case len(c.Message.ToolCalls) == 1:
		a = rollout.ToolIndex(c.Message.ToolCalls[0].Function.Name)
		if a < 0 || c.FinishReason != openai.FinishReasonToolCalls || c.Message.Content != "" {
			t.Fatalf("bad tool call choice %+v", c)
		}
	case len(c.Message.ToolCalls) == 0:
		if c.FinishReason != openai.FinishReasonStop || c.Message.Content == "" {
			t.Fatalf("bad text choice %+v", c)
		}
	default:
		t.Fatalf("%d tool calls", len(c.Message.ToolCalls))
	}
	if c.LogProbs == nil || len(c.LogProbs.Content) != 1 {
		t.Fatalf("logprobs %+v, want one token", c.LogProbs)
	}
	lp := c.LogProbs.Content[0]
	if want := tokenStrings[a]; lp.Token != want {
		t.Fatalf("token %q for output %d, want %q", lp.Token, a, want)
	}
	return a, lp.LogProb
}

func policyLogProbs(p *Policy, s rollout.State, temp float64, m Mask) [NumOutputs]float64 {
	x := FeaturesOf(&s)
	return p.LogProbs(&x, temp, m)
}

func TestGoOpenAIClient(t *testing.T) {
	_, srv := mustServe(t, 1)
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = srv.URL + "/v1"
	client := openai.NewClientWithConfig(cfg)
	want := policyLogProbs(BasePolicy(), stateWaitingRight, 1, AllOutputs)
	toolCalls := 0
	for seed := range 20 {
		resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
			Model:              BaseModelName,
			Messages:           recode[[]openai.ChatCompletionMessage](t, conversation(stateWaitingRight)),
			Tools:              recode[[]openai.Tool](t, rollout.Tools()),
			ToolChoice:         "auto",
			LogProbs:           true,
			TopLogProbs:        3,
			Seed:               &seed,
			ChatTemplateKwargs: map[string]any{"enable_thinking": false},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Model != BaseModelName {
			t.Fatalf("response header %q %q %q", resp.ID, resp.Object, resp.Model)
		}
		if resp.Usage.CompletionTokens != 1 || resp.Usage.PromptTokens < 100 ||
			resp.Usage.TotalTokens != resp.Usage.PromptTokens+1 {
			t.Fatalf("usage %+v", resp.Usage)
		}
		a, lp := sampled(t, resp)
		if math.Abs(lp-want[a]) > 1e-12 {
			t.Fatalf("logprob of %s = %v, want %v", OutputName(a), lp, want[a])
		}
		tok := resp.Choices[0].LogProbs.Content[0]
		if string(tok.Bytes) != OutputName(a) {
			t.Fatalf("bytes %q, want %q", tok.Bytes, OutputName(a))
		}
		top := tok.TopLogProbs
		if len(top) != 3 || top[0].Token != tokenStrings[outPickUpRight] || top[0].LogProb < top[1].LogProb || top[1].LogProb < top[2].LogProb {
			t.Fatalf("top_logprobs %+v", top)
		}
		if a != TextOutput {
			toolCalls++
			tc := resp.Choices[0].Message.ToolCalls[0]
			if !strings.HasPrefix(tc.ID, "chatcmpl-tool-") || tc.Type != openai.ToolTypeFunction || tc.Function.Arguments != "{}" {
				t.Fatalf("tool call %+v", tc)
			}
			if act, _ := rollout.Decide(recode[rollout.Message](t, resp.Choices[0].Message)); act != OutputName(a) {
				t.Fatalf("rollout.Decide=%s, want %s", act, OutputName(a))
			}
		}
	}
	if toolCalls == 0 {
		t.Fatal("no tool call in 20 samples")
	}
}

// TestResponseShape checks the raw JSON against vLLM's shape, which typed
// clients would not notice: null content, stop_reason, bytes as integers.
func TestResponseShape(t *testing.T) {
	_, srv := mustServe(t, 1)
	code, raw := do(t, http.MethodPost, srv.URL+"/v1/chat/completions",
		chatBody(BaseModelName, stateWaitingRight, map[string]any{"temperature": 0, "top_logprobs": 1}))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, raw)
	}
	var v struct {
		Choices []struct {
			Message    map[string]json.RawMessage `json:"message"`
			StopReason json.RawMessage            `json:"stop_reason"`
			Logprobs   struct {
				Content []map[string]json.RawMessage `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Choices[0]
	if string(c.Message["content"]) != "null" || string(c.StopReason) != "null" {
		t.Fatalf("content %s, stop_reason %s; want null, null", c.Message["content"], c.StopReason)
	}
	if got, want := string(c.Logprobs.Content[0]["bytes"]), "[112,105,99,107,95,117,112,95,114,105,103,104,116]"; got != want {
		t.Fatalf("bytes %s, want %s (pick_up_right)", got, want)
	}
}

// TestTokenIDs: with return_token_ids, vLLM's fields — the choice's
// token_ids, the answer's prompt_token_ids (one per prompt token) — and
// without it, neither.
func TestTokenIDs(t *testing.T) {
	_, srv := mustServe(t, 1)
	var v struct {
		Choices []struct {
			TokenIDs []int `json:"token_ids"`
			Logprobs struct {
				Content []struct{ Token string } `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
		PromptTokenIDs []int `json:"prompt_token_ids"`
	}
	body := chatBody(BaseModelName, stateWaitingRight, map[string]any{"return_token_ids": true, "seed": 3})
	code, raw := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", body)
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, raw)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Choices[0]
	if len(c.TokenIDs) != 1 || "token_id:"+strconv.Itoa(c.TokenIDs[0]) != c.Logprobs.Content[0].Token {
		t.Fatalf("token_ids %v for logprobs token %q", c.TokenIDs, c.Logprobs.Content[0].Token)
	}
	if len(v.PromptTokenIDs) != v.Usage.PromptTokens || slices.ContainsFunc(v.PromptTokenIDs, func(id int) bool { return id < 0 || id >= tokenBase }) {
		t.Fatalf("%d prompt token ids for %d prompt tokens, want as many, each below %d", len(v.PromptTokenIDs), v.Usage.PromptTokens, tokenBase)
	}
	_, again := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", body)
	var w struct {
		PromptTokenIDs []int `json:"prompt_token_ids"`
	}
	json.Unmarshal(again, &w)
	if !slices.Equal(w.PromptTokenIDs, v.PromptTokenIDs) {
		t.Fatal("the same prompt gave different prompt token ids")
	}

	delete(body, "return_token_ids")
	_, raw = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", body)
	if strings.Contains(string(raw), "token_ids") {
		t.Fatalf("token ids without return_token_ids: %s", raw)
	}
}

func TestSeedDeterminism(t *testing.T) {
	_, srv := mustServe(t, 1)
	counts := make([]int, NumOutputs)
	for seed := range 300 {
		body := chatBody(BaseModelName, stateFirstRound, map[string]any{"seed": seed})
		_, r1, _ := chat(t, srv.URL, body)
		_, r2, _ := chat(t, srv.URL, body)
		a1, l1 := sampled(t, r1)
		a2, l2 := sampled(t, r2)
		if a1 != a2 || l1 != l2 {
			t.Fatalf("seed %d: %s (%v) then %s (%v)", seed, OutputName(a1), l1, OutputName(a2), l2)
		}
		counts[a1]++
	}
	// The seeded draws follow the policy: pick_up_left's share is within
	// four standard deviations of its probability.
	p := math.Exp(policyLogProbs(BasePolicy(), stateFirstRound, 1, AllOutputs)[outPickUpLeft])
	sd := math.Sqrt(300 * p * (1 - p))
	if got := float64(counts[outPickUpLeft]); math.Abs(got-300*p) > 4*sd {
		t.Fatalf("pick_up_left drawn %v times in 300, expected %.1f ± %.1f", got, 300*p, 4*sd)
	}
}

func TestToolChoiceModes(t *testing.T) {
	_, srv := mustServe(t, 1)
	base := BasePolicy()
	think := []rollout.Tool{rollout.Tools()[outThink], rollout.Tools()[outEat]}
	for _, tc := range []struct {
		name  string
		extra map[string]any
		mask  Mask
	}{
		{"auto", map[string]any{"tool_choice": "auto"}, AllOutputs},
		{"required", map[string]any{"tool_choice": "required"}, AllOutputs &^ (1 << TextOutput)},
		{"none", map[string]any{"tool_choice": "none"}, 1 << TextOutput},
		{"named", map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "think"}}}, 1 << outThink},
		{"no tools", map[string]any{"tools": nil}, 1 << TextOutput},
		{"subset of tools", map[string]any{"tools": think}, 1<<outThink | 1<<outEat | 1<<TextOutput},
		{"temperature 0.5", map[string]any{"temperature": 0.5}, AllOutputs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			temp := 1.0
			if v, ok := tc.extra["temperature"]; ok {
				temp = v.(float64)
			}
			want := policyLogProbs(base, stateFirstRound, temp, tc.mask)
			for seed := range 40 {
				extra := map[string]any{"seed": seed}
				for k, v := range tc.extra {
					extra[k] = v
				}
				code, resp, raw := chat(t, srv.URL, chatBody(BaseModelName, stateFirstRound, extra))
				if code != http.StatusOK {
					t.Fatalf("status %d: %s", code, raw)
				}
				a, lp := sampled(t, resp)
				if !tc.mask.Has(a) {
					t.Fatalf("output %s outside the allowed set", OutputName(a))
				}
				if math.Abs(lp-want[a]) > 1e-12 {
					t.Fatalf("logprob of %s = %v, want %v", OutputName(a), lp, want[a])
				}
			}
		})
	}
}

func TestTemperatureZeroIsArgmax(t *testing.T) {
	_, srv := mustServe(t, 1)
	for seed := range 10 {
		_, resp, _ := chat(t, srv.URL, chatBody(BaseModelName, stateWaitingRight, map[string]any{"temperature": 0, "seed": seed}))
		if a, _ := sampled(t, resp); a != outPickUpRight {
			t.Fatalf("greedy output %s, want pick_up_right", OutputName(a))
		}
	}
}

func TestChatErrors(t *testing.T) {
	_, srv := mustServe(t, 1)
	named := func(name string) map[string]any {
		return map[string]any{"type": "function", "function": map[string]string{"name": name}}
	}
	for _, tc := range []struct {
		name  string
		body  any
		code  int
		param string
		msg   string
	}{
		{"unknown model", chatBody("nope", stateFirstRound, nil), 404, "", "The model `nope` does not exist."},
		{"malformed json", `{"model":`, 400, "", "malformed JSON body"},
		{"messages not a list", `{"model":"refmodel","messages":"hi"}`, 400, "messages", "messages: expected"},
		{"no messages", map[string]any{"model": "refmodel", "messages": []any{}}, 400, "messages", "messages: at least one"},
		{"bad role", map[string]any{"model": "refmodel", "messages": []any{map[string]string{"role": "robot", "content": "x"}}}, 400, "messages[0].role", "accepted system"},
		{"negative temperature", chatBody(BaseModelName, stateFirstRound, map[string]any{"temperature": -1}), 400, "temperature", "must be >= 0"},
		{"top_logprobs 21", chatBody(BaseModelName, stateFirstRound, map[string]any{"top_logprobs": 21}), 400, "top_logprobs", "accepted 0 to 20"},
		{"top_logprobs without logprobs", chatBody(BaseModelName, stateFirstRound, map[string]any{"top_logprobs": 2, "logprobs": false}), 400, "top_logprobs", "logprobs"},
		{"n 2", chatBody(BaseModelName, stateFirstRound, map[string]any{"n": 2}), 400, "n", "only 1"},
		{"max_tokens 0", chatBody(BaseModelName, stateFirstRound, map[string]any{"max_tokens": 0}), 400, "max_tokens", "at least 1"},
		{"named tool not in tools", chatBody(BaseModelName, stateFirstRound, map[string]any{"tool_choice": named("fly")}), 400, "tool_choice", `"fly" is not in "tools"`},
		{"required without tools", chatBody(BaseModelName, stateFirstRound, map[string]any{"tool_choice": "required", "tools": nil}), 400, "tool_choice", "required"},
		{"bad tool_choice", chatBody(BaseModelName, stateFirstRound, map[string]any{"tool_choice": "sometimes"}), 400, "tool_choice", "accepted auto"},
		{"stream", chatBody(BaseModelName, stateFirstRound, map[string]any{"stream": true}), 400, "stream", "not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, raw := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d: %s", code, tc.code, raw)
			}
			var eb inference.ErrorBody
			if err := json.Unmarshal(raw, &eb); err != nil {
				t.Fatalf("error body %s: %v", raw, err)
			}
			wantType := map[int]string{400: "BadRequestError", 404: "NotFoundError"}[tc.code]
			if eb.Error.Type != wantType || eb.Error.Code != tc.code || !strings.Contains(eb.Error.Message, tc.msg) {
				t.Fatalf("error %+v, want type %s, code %d, message containing %q", eb.Error, wantType, tc.code, tc.msg)
			}
			if gotParam := ""; eb.Error.Param != nil {
				gotParam = *eb.Error.Param
				if gotParam != tc.param {
					t.Fatalf("param %q, want %q", gotParam, tc.param)
				}
			} else if tc.param != "" {
				t.Fatalf("param null, want %q", tc.param)
			}
		})
	}
}

func saveTestAdapter(t *testing.T, seed uint64, b0 float64) (string, *Adapter) {
	t.Helper()
	a, err := NewAdapter(8, 16, seed)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.B {
		a.B[i] = b0 * float64(i%5-2)
	}
	dir := filepath.Join(t.TempDir(), "adapter")
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	return dir, a
}

func TestAdapterLifecycle(t *testing.T) {
	_, srv := mustServe(t, 1)
	dir1, a1 := saveTestAdapter(t, 1, 0.3)
	dir2, a2 := saveTestAdapter(t, 2, -0.4)
	load := func(req inference.LoadAdapterRequest) (int, string) {
		code, body := do(t, http.MethodPost, srv.URL+"/v1/load_lora_adapter", req)
		return code, string(body)
	}
	unload := func(name string) (int, string) {
		code, body := do(t, http.MethodPost, srv.URL+"/v1/unload_lora_adapter", inference.UnloadAdapterRequest{LoraName: name})
		return code, string(body)
	}
	logprob := func(model string) (int, float64, string) {
		code, resp, raw := chat(t, srv.URL, chatBody(model, stateWaitingRight, map[string]any{"temperature": 0}))
		if code != http.StatusOK {
			return code, 0, string(raw)
		}
		_, lp := sampled(t, resp)
		return code, lp, ""
	}
	greedy := func(a *Adapter) float64 {
		lp := policyLogProbs(NewPolicy(a), stateWaitingRight, 1, AllOutputs)
		return slices.Max(lp[:])
	}

	if code, body := load(inference.LoadAdapterRequest{LoraName: "a", LoraPath: dir1}); code != 200 || body != "Success: LoRA adapter 'a' added successfully." {
		t.Fatalf("load: %d %q", code, body)
	}
	if _, lp, _ := logprob("a"); math.Abs(lp-greedy(a1)) > 1e-12 {
		t.Fatalf("adapter a logprob %v, want %v", lp, greedy(a1))
	}
	code, raw := do(t, http.MethodGet, srv.URL+"/v1/models", nil)
	var ml inference.ModelList
	if err := json.Unmarshal(raw, &ml); err != nil || code != 200 {
		t.Fatalf("models: %d %s", code, raw)
	}
	if len(ml.Data) != 2 || ml.Object != "list" ||
		ml.Data[0].ID != BaseModelName || ml.Data[0].Parent != nil || ml.Data[0].OwnedBy != "vllm" ||
		ml.Data[1].ID != "a" || ml.Data[1].Root != dir1 || ml.Data[1].Parent == nil || *ml.Data[1].Parent != BaseModelName {
		t.Fatalf("models: %s", raw)
	}

	if code, body := load(inference.LoadAdapterRequest{LoraName: "a", LoraPath: dir2}); code != 400 || !strings.Contains(body, "already been loaded") || !strings.Contains(body, "BadRequestError") {
		t.Fatalf("duplicate load: %d %s", code, body)
	}
	if _, lp, _ := logprob("a"); math.Abs(lp-greedy(a1)) > 1e-12 {
		t.Fatal("a refused duplicate load changed the adapter")
	}
	if code, body := load(inference.LoadAdapterRequest{LoraName: "a", LoraPath: dir2, LoadInplace: true}); code != 200 {
		t.Fatalf("inplace load: %d %s", code, body)
	}
	if _, lp, _ := logprob("a"); math.Abs(lp-greedy(a2)) > 1e-12 {
		t.Fatalf("after inplace load logprob %v, want %v", lp, greedy(a2))
	}

	missing := filepath.Join(t.TempDir(), "missing")
	if code, body := load(inference.LoadAdapterRequest{LoraName: "b", LoraPath: missing}); code != 400 || !strings.Contains(body, missing) {
		t.Fatalf("bad path: %d %s", code, body)
	}
	corrupt := filepath.Join(t.TempDir(), "corrupt")
	os.MkdirAll(corrupt, 0o755)
	os.WriteFile(filepath.Join(corrupt, ConfigFile), []byte("{}"), 0o644)
	if code, body := load(inference.LoadAdapterRequest{LoraName: "b", LoraPath: corrupt}); code != 400 || !strings.Contains(body, corrupt) {
		t.Fatalf("corrupt dir: %d %s", code, body)
	}

	if code, body := unload("a"); code != 200 || body != "Success: LoRA adapter 'a' removed successfully." {
		t.Fatalf("unload: %d %q", code, body)
	}
	if code, _, body := logprob("a"); code != 404 || !strings.Contains(body, "The model `a` does not exist.") {
		t.Fatalf("unloaded model: %d %s", code, body)
	}
	if code, body := unload("a"); code != 404 || !strings.Contains(body, "NotFoundError") {
		t.Fatalf("second unload: %d %s", code, body)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	_, srv := mustServe(t, 1)
	if code, _ := do(t, http.MethodGet, srv.URL+"/health", nil); code != 200 {
		t.Fatalf("/health %d", code)
	}
	for range 3 {
		chat(t, srv.URL, chatBody(BaseModelName, stateWaitingRight, map[string]any{"temperature": 0}))
	}
	code, raw := do(t, http.MethodGet, srv.URL+"/metrics", nil)
	if code != 200 {
		t.Fatalf("/metrics %d", code)
	}
	for _, want := range []string{
		`vllm:num_requests_running{model_name="refmodel"} 0`,
		`vllm:num_requests_waiting{model_name="refmodel"} 0`,
		`vllm:kv_cache_usage_perc{model_name="refmodel"} 0`,
		`vllm:request_success_total{finished_reason="tool_calls",model_name="refmodel"} 3`,
		`vllm:generation_tokens_total{model_name="refmodel"} 3`,
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, raw)
		}
	}
}
