package inference

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
)

const okCompletion = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"think","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:5","logprob":-0.25,"bytes":[1],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// fastRetry retries within milliseconds.
func fastRetry(retries int) *httpx.Policy {
	return &httpx.Policy{Retries: retries, BaseDelay: time.Millisecond}
}

func chatReq() *rollout.Request {
	return &rollout.Request{Model: "m", Messages: []rollout.Message{{Role: rollout.RoleUser, Content: "hi"}}}
}

// scripted answers the i-th request (from 1) with answers[i-1] (the last
// one repeats): a status and a body.
func scripted(t *testing.T, answers ...func(w http.ResponseWriter)) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		i := int(n.Add(1)) - 1
		answers[min(i, len(answers)-1)](w)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func status(code int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
}

func TestChatKeepsRawChoice(t *testing.T) {
	srv, _ := scripted(t, status(200, okCompletion))
	c := NewChatClient(srv.URL+"/v1", ChatOptions{})
	got, err := c.Complete(context.Background(), chatReq())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got.Raw), `{"index":0,"message"`) || !strings.Contains(string(got.Raw), `"stop_reason":null`) {
		t.Fatalf("raw choice = %s", got.Raw)
	}
	if got.Choice.Message.ToolCalls[0].Function.Name != "think" || got.Usage != (rollout.Usage{PromptTokens: 3, CompletionTokens: 1}) {
		t.Fatalf("parsed choice = %+v", got.Choice)
	}
}

func TestChatRetriesThenSucceeds(t *testing.T) {
	srv, n := scripted(t,
		status(500, `{"error":{"message":"boom","type":"InternalServerError","code":500}}`),
		status(200, `not json at all`),
		status(502, `<html>bad gateway</html>`),
		status(200, okCompletion))
	c := NewChatClient(srv.URL+"/v1", ChatOptions{Retry: fastRetry(3)})
	if _, err := c.Complete(context.Background(), chatReq()); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 4 {
		t.Fatalf("%d requests, want 4", n.Load())
	}
}

func TestChatGarbageGivesClearError(t *testing.T) {
	srv, n := scripted(t, status(200, `{"hello":"world"}`))
	c := NewChatClient(srv.URL+"/v1", ChatOptions{Retry: fastRetry(1)})
	_, err := c.Complete(context.Background(), chatReq())
	var ge *GarbageError
	if !errors.As(err, &ge) || !strings.Contains(err.Error(), `{\"hello\":\"world\"}`) || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("err = %v, want a GarbageError quoting the body and naming the URL", err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

func TestChatBadRequestIsNotRetried(t *testing.T) {
	srv, n := scripted(t, status(404, `{"error":{"message":"The model `+"`m`"+` does not exist.","type":"NotFoundError","param":null,"code":404}}`))
	c := NewChatClient(srv.URL+"/v1", ChatOptions{Retry: fastRetry(3)})
	_, err := c.Complete(context.Background(), chatReq())
	if err == nil || !strings.Contains(err.Error(), "does not exist") || n.Load() != 1 {
		t.Fatalf("err = %v after %d requests, want the server's message after 1", err, n.Load())
	}
}

func TestChatHangTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv, n := scripted(t, func(w http.ResponseWriter) { <-release })
	defer close(release)
	c := NewChatClient(srv.URL+"/v1", ChatOptions{RequestTimeout: 250 * time.Millisecond, Retry: fastRetry(1)})
	_, err := c.Complete(context.Background(), chatReq())
	var te *TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "no answer within 250ms") || strings.Count(err.Error(), srv.URL+"/v1/chat/completions") != 1 {
		t.Fatalf("err = %v, want a timeout naming the request's URL once", err)
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

func TestChatConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c := NewChatClient(url+"/v1", ChatOptions{Retry: fastRetry(2)})
	_, err := c.Complete(context.Background(), chatReq())
	if err == nil || !strings.Contains(err.Error(), "3 attempt(s)") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestChatSendsToolsInBody(t *testing.T) {
	var got map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.Write([]byte(okCompletion))
	}))
	defer srv.Close()
	req := chatReq()
	req.Tools = []rollout.Tool{{Type: "function", Function: rollout.Function{Name: "think", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}}}
	req.ToolChoice = "auto"
	c := NewChatClient(srv.URL+"/v1", ChatOptions{})
	for range 2 { // the second call uses the cached encoding
		got = nil
		if _, err := c.Complete(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(req.Tools)
		if string(got["tools"]) != string(want) || string(got["tool_choice"]) != `"auto"` || string(got["model"]) != `"m"` {
			t.Fatalf("body fields: tools %s tool_choice %s model %s", got["tools"], got["tool_choice"], got["model"])
		}
	}
	if len(req.Tools) != 1 {
		t.Fatal("Complete modified the caller's request")
	}
}

func TestChatSendsPreEncodedMessages(t *testing.T) {
	var got struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.Write([]byte(okCompletion))
	}))
	defer srv.Close()
	c := NewChatClient(srv.URL+"/v1", ChatOptions{})
	req := chatReq()
	req.Messages = append(req.Messages, rollout.Message{Role: rollout.RoleAssistant, Content: "quoted \"messages\":null inside"})
	for _, m := range req.Messages {
		b, _ := json.Marshal(m)
		req.EncodedMessages = append(req.EncodedMessages, b)
	}
	req.Tools = []rollout.Tool{{Type: "function", Function: rollout.Function{Name: "think"}}}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if got.Model != "m" || len(got.Messages) != 2 || string(got.Messages[1]) != string(req.EncodedMessages[1]) || len(got.Tools) != 1 {
		t.Fatalf("body: model %q messages %s tools %d", got.Model, got.Messages, len(got.Tools))
	}
	// Encodings that do not match the messages one to one are ignored.
	req.EncodedMessages = req.EncodedMessages[:1]
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 2 {
		t.Fatalf("%d messages sent, want 2", len(got.Messages))
	}
}

// echoServer records each request body and answers answer.
func echoServer(t *testing.T, answer string) (*httptest.Server, *[]map[string]json.RawMessage) {
	var bodies []map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		bodies = append(bodies, got)
		w.Write([]byte(answer))
	}))
	t.Cleanup(srv.Close)
	return srv, &bodies
}

func TestChatRequestFields(t *testing.T) {
	srv, bodies := echoServer(t, okCompletion)
	seed := 7
	req := chatReq()
	// go-openai's client refuses these names with max_tokens or logprobs.
	req.Model = "o3-baseline-step-0001"
	req.Temperature = 0
	req.MaxTokens = 64
	req.LogProbs = true
	req.Seed = &seed
	req.ChatTemplateKwargs = map[string]any{"enable_thinking": false}
	if _, err := NewChatClient(srv.URL+"/v1", ChatOptions{}).Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got := (*bodies)[0]
	for k, want := range map[string]string{
		"model": `"o3-baseline-step-0001"`, "temperature": `0`, "max_tokens": `64`, "logprobs": `true`,
		"return_token_ids": `true`, "seed": `7`, "chat_template_kwargs": `{"enable_thinking":false}`,
		"messages": `[{"role":"user","content":"hi"}]`,
	} {
		if string(got[k]) != want {
			t.Errorf("body %s = %s, want %s", k, got[k], want)
		}
	}
	if _, ok := got["max_completion_tokens"]; ok {
		t.Error("max_completion_tokens sent without the option")
	}

	// The option sends the limit under the newer name, and OmitTokenIDs
	// leaves return_token_ids out.
	c := NewChatClient(srv.URL+"/v1", ChatOptions{MaxCompletionTokens: true, OmitTokenIDs: true})
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	got = (*bodies)[1]
	if string(got["max_completion_tokens"]) != "64" || got["max_tokens"] != nil || got["return_token_ids"] != nil {
		t.Fatalf("body with options: max_completion_tokens %s max_tokens %s return_token_ids %s",
			got["max_completion_tokens"], got["max_tokens"], got["return_token_ids"])
	}
}

// vllmCompletion is shaped as vLLM's answer with return_token_ids, a
// reasoning parser and a turn cut at the token limit.
const vllmCompletion = `{"id":"c","object":"chat.completion","created":1,"model":"m",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"<tool_call>{\"name\": \"ea","reasoning":"r1","reasoning_content":"r2","tool_calls":[]},` +
	`"logprobs":{"content":[{"token":"token_id:9","logprob":-0.5}]},"finish_reason":"length","stop_reason":null,"token_ids":[9,10]}],` +
	`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5},"prompt_logprobs":null,"prompt_token_ids":[1,2,3],"kv_transfer_params":null}`

func TestChatKeepsTokenIDsAndReasoning(t *testing.T) {
	srv, _ := scripted(t, status(200, vllmCompletion))
	got, err := NewChatClient(srv.URL+"/v1", ChatOptions{}).Complete(context.Background(), chatReq())
	if err != nil {
		t.Fatal(err)
	}
	if string(got.PromptTokenIDs) != "[1,2,3]" {
		t.Fatalf("prompt token ids = %s", got.PromptTokenIDs)
	}
	fw := got.Forwarded()
	var choice map[string]json.RawMessage
	if err := json.Unmarshal(fw, &choice); err != nil {
		t.Fatalf("forwarded choice %s: %v", fw, err)
	}
	if string(choice["token_ids"]) != "[9,10]" || string(choice["prompt_token_ids"]) != "[1,2,3]" || string(choice["finish_reason"]) != `"length"` {
		t.Fatalf("forwarded choice %s", fw)
	}
	if !strings.HasPrefix(string(fw), string(got.Raw[:len(got.Raw)-1])) {
		t.Fatalf("forwarded choice %s does not start with the raw choice's bytes", fw)
	}
	var msg struct{ Reasoning, ReasoningContent string }
	json.Unmarshal(choice["message"], &struct {
		R  *string `json:"reasoning"`
		RC *string `json:"reasoning_content"`
	}{&msg.Reasoning, &msg.ReasoningContent})
	if msg.Reasoning != "r1" || msg.ReasoningContent != "r2" {
		t.Fatalf("reasoning fields lost: %+v in %s", msg, fw)
	}
	if action, reason := rollout.DecideChoice(&got.Choice); action != rollout.Invalid || !strings.Contains(reason, "length") {
		t.Fatalf("DecideChoice = %q %q, want invalid for a truncated turn", action, reason)
	}
}

func TestChatAutoToolChoiceNeedsServerFlags(t *testing.T) {
	srv, n := scripted(t, status(400, `{"error":{"message":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set","type":"BadRequestError","param":null,"code":400}}`))
	_, err := NewChatClient(srv.URL+"/v1", ChatOptions{Retry: fastRetry(3)}).Complete(context.Background(), chatReq())
	if !errors.Is(err, ErrAutoToolChoice) || !strings.Contains(err.Error(), "--enable-auto-tool-choice --tool-call-parser hermes") {
		t.Fatalf("err = %v, want ErrAutoToolChoice naming the flags", err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d requests, want 1 (a 400 is not retried)", n.Load())
	}
}

// FuzzDecodeCompletion: any answer body is a completion or a GarbageError,
// never a panic; an accepted one has a JSON object as its raw choice.
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(okCompletion)
	f.Add(vllmCompletion)
	f.Add(`{"choices":[1]}`)
	f.Add(`{"choices":[{}],"prompt_token_ids":null}`)
	f.Fuzz(func(t *testing.T, body string) {
		c, err := decodeCompletion([]byte(body))
		if err != nil {
			var ge *GarbageError
			if !errors.As(err, &ge) {
				t.Fatalf("error %v is not a GarbageError", err)
			}
			return
		}
		if !json.Valid(c.Forwarded()) {
			t.Fatalf("forwarded choice %s is not JSON (from %q)", c.Forwarded(), body)
		}
	})
}

// hidden hides a Completer's other methods: a Runner sees no
// rollout.EncodedReader and keeps and sends Messages too.
type hidden struct{ rollout.Completer }

// TestRunnerSendsTheSameBodiesWithEncodedMessagesOnly: an episode played
// through a ChatClient, which reads EncodedMessages alone so the Runner
// keeps no Messages, sends byte for byte the requests it sends when the
// Runner keeps and sends both forms.
func TestRunnerSendsTheSameBodiesWithEncodedMessagesOnly(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.Write([]byte(okCompletion))
	}))
	defer srv.Close()
	c := NewChatClient(srv.URL+"/v1", ChatOptions{})
	if !c.ReadsEncodedMessages() {
		t.Fatal("ChatClient does not read EncodedMessages alone")
	}
	env := rollout.DefaultEnvConfig()
	env.N, env.Rounds, env.Mode, env.Seed = 3, 3, rollout.Sequential, 7
	spec := rollout.EpisodeSpec{ID: "e", Model: "m", Env: env, Sampling: rollout.Sampling{Temperature: 1}, SampleSeed: 11}
	play := func(cl rollout.Completer) []string {
		mu.Lock()
		bodies = nil
		mu.Unlock()
		ep := (&rollout.Runner{Client: cl}).Run(context.Background(), spec)
		if ep.Errored {
			t.Fatal(ep.Error)
		}
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bodies...)
	}
	encoded, both := play(c), play(hidden{c})
	if len(encoded) != 9 || len(both) != 9 {
		t.Fatalf("%d and %d requests, want 9 each (3 philosophers x 3 rounds)", len(encoded), len(both))
	}
	for i := range encoded {
		if encoded[i] != both[i] {
			t.Fatalf("request %d differs:\nencoded only: %s\nboth forms:   %s", i+1, encoded[i], both[i])
		}
	}
	if !strings.Contains(encoded[8], `"role":"tool"`) {
		t.Fatalf("last request carries no conversation: %s", encoded[8])
	}
}
