package refmodel

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
)

// mustServeStrict serves a strict Backend on a loopback httptest server.
func mustServeStrict(t *testing.T, s Strict) *httptest.Server {
	t.Helper()
	b, err := New(Options{DataDir: t.TempDir(), Seed: 1, Strict: &s})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	srv := httptest.NewServer(b.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func TestStrict_AutoToolChoiceNeedsFlags(t *testing.T) {
	srv := mustServeStrict(t, Strict{})
	for _, tc := range []struct {
		name  string
		extra map[string]any
		want  int
	}{
		{"explicit auto", map[string]any{"tool_choice": "auto"}, http.StatusBadRequest},
		{"implied by tools", nil, http.StatusBadRequest},
		{"required", map[string]any{"tool_choice": "required"}, http.StatusOK},
		{"named", map[string]any{"tool_choice": map[string]any{"type": "function", "function": map[string]string{"name": "think"}}}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, raw := chat(t, srv.URL, chatBody(BaseModelName, stateFirstRound, tc.extra))
			if code != tc.want {
				t.Fatalf("status=%d (%s), want %d", code, raw, tc.want)
			}
			if code == http.StatusBadRequest && !strings.Contains(string(raw), "tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set") {
				t.Fatalf("body %s lacks vLLM's message", raw)
			}
		})
	}
	// grpo's chat client names the flags.
	c := inference.NewChatClient(srv.URL+"/v1", inference.ChatOptions{})
	req := &rollout.Request{}
	req.Model, req.Messages, req.Tools, req.ToolChoice = BaseModelName, conversation(stateFirstRound), rollout.Tools(), "auto"
	_, err := c.Complete(context.Background(), req)
	if !errors.Is(err, inference.ErrAutoToolChoice) || !strings.Contains(err.Error(), "--enable-auto-tool-choice") {
		t.Fatalf("Complete()=%v, want ErrAutoToolChoice naming the flags", err)
	}

	// Started with the flags, auto is accepted.
	srv = mustServeStrict(t, Strict{AutoToolChoice: true})
	if code, _, raw := chat(t, srv.URL, chatBody(BaseModelName, stateFirstRound, map[string]any{"tool_choice": "auto"})); code != http.StatusOK {
		t.Fatalf("with the flags: status=%d %s", code, raw)
	}
}

func TestStrict_LoadInplaceIgnored(t *testing.T) {
	srv := mustServeStrict(t, Strict{AutoToolChoice: true})
	p1, _ := saveTestAdapter(t, 1, 0.1)
	p2, _ := saveTestAdapter(t, 2, 0.2)
	ctx := context.Background()
	admin := inference.NewAdminClient(srv.URL+"/v1", inference.AdminOptions{})
	if err := admin.LoadAdapter(ctx, "o3-run", p1, true); err != nil {
		t.Fatal(err)
	}
	err := admin.LoadAdapter(ctx, "o3-run", p2, true)
	if !errors.Is(err, inference.ErrAdapterExists) || !strings.Contains(err.Error(), "has already been loaded") {
		t.Fatalf("second in-place load=%v, want vLLM's 400 already loaded", err)
	}
	m, ok, err := admin.Adapter(ctx, "o3-run")
	if err != nil || !ok || m.Root != p1 {
		t.Fatalf("Adapter()=%+v %v %v, want the first path %s kept", m, ok, err, p1)
	}
	// A path with nothing there: current vLLM's 404.
	err = admin.LoadAdapter(ctx, "other", p1+"-missing", false)
	if !errors.Is(err, inference.ErrAdapterPathNotFound) {
		t.Fatalf("load of a missing path=%v, want ErrAdapterPathNotFound", err)
	}
}

func TestStrict_Temperature(t *testing.T) {
	s := &Strict{}
	for _, tc := range []struct{ in, want float64 }{
		{0, 0}, {0.001, 0.01}, {0.0099, 0.01}, {0.01, 0.01}, {0.7, 0.7},
	} {
		if got := s.temperature(tc.in); got != tc.want {
			t.Errorf("temperature(%v)=%v, want %v", tc.in, got, tc.want)
		}
	}
	var lenient *Strict
	if got := lenient.temperature(0.001); got != 0.001 {
		t.Errorf("lenient temperature(0.001)=%v, want it unchanged", got)
	}
	// On the wire: 0.001 samples as 0.01, so the logprobs match a request
	// at 0.01 and differ from greedy's.
	srv := mustServeStrict(t, Strict{AutoToolChoice: true})
	seed := 7
	lp := func(temp float64) float64 {
		_, resp, raw := chat(t, srv.URL, chatBody(BaseModelName, stateWaitingRight, map[string]any{"temperature": temp, "seed": seed, "tool_choice": "required"}))
		if len(resp.Choices) != 1 || resp.Choices[0].LogProbs == nil {
			t.Fatalf("no logprobs: %s", raw)
		}
		return resp.Choices[0].LogProbs.Content[0].LogProb
	}
	if a, b := lp(0.001), lp(0.01); a != b {
		t.Fatalf("logprob at 0.001=%v, at 0.01=%v: want equal", a, b)
	}
}

func TestStrict_QuirkShares(t *testing.T) {
	s := &Strict{Quirks: 0.3}
	for _, tc := range []struct {
		u    float64
		want int
	}{
		{0, quirkUnparsed}, {0.099, quirkUnparsed}, {0.1, quirkSeveral}, {0.199, quirkSeveral},
		{0.2, quirkTruncated}, {0.2999, quirkTruncated}, {0.3, quirkNone}, {0.99, quirkNone},
	} {
		if got := s.quirk(tc.u); got != tc.want {
			t.Errorf("quirk(%v)=%d, want %d", tc.u, got, tc.want)
		}
	}
	if got := (*Strict)(nil).quirk(0); got != quirkNone {
		t.Errorf("nil quirk=%d, want none", got)
	}
}

func TestStrict_QuirksOnTheWire(t *testing.T) {
	// Every tool call quirky: over seeds, each shape appears, and the same
	// seed gives the same answer.
	srv := mustServeStrict(t, Strict{AutoToolChoice: true, Quirks: 1})
	seen := map[string]int{}
	for seed := range 60 {
		body := chatBody(BaseModelName, stateWaitingRight, map[string]any{"seed": seed, "tool_choice": "required"})
		code, _, raw := chat(t, srv.URL, body)
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, raw)
		}
		var resp struct {
			Choices []struct {
				Message struct {
					Content   *string           `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			t.Fatal(err)
		}
		ch := resp.Choices[0]
		switch {
		case ch.FinishReason == "length" && ch.Message.Content != nil && len(ch.Message.ToolCalls) == 0:
			seen["truncated"]++
		case ch.FinishReason == "stop" && ch.Message.Content != nil && strings.HasPrefix(*ch.Message.Content, "<tool_call>") && len(ch.Message.ToolCalls) == 0:
			seen["unparsed"]++
		case ch.FinishReason == "tool_calls" && len(ch.Message.ToolCalls) == 2:
			seen["several"]++
		default:
			t.Fatalf("seed %d: answer %s is no quirk", seed, raw)
		}
		_, _, again := chat(t, srv.URL, body)
		if strip(again) != strip(raw) {
			t.Fatalf("seed %d: answers differ:\n%s\n%s", seed, raw, again)
		}
	}
	for _, k := range []string{"truncated", "unparsed", "several"} {
		if seen[k] == 0 {
			t.Errorf("no %s answer in 60 seeds (%v)", k, seen)
		}
	}
}

// strip blanks the random ids and timestamps of an answer.
func strip(raw []byte) string {
	var v map[string]any
	_ = json.Unmarshal(raw, &v)
	delete(v, "id")
	delete(v, "created")
	for _, c := range v["choices"].([]any) {
		msg := c.(map[string]any)["message"].(map[string]any)
		if calls, ok := msg["tool_calls"].([]any); ok {
			for _, tc := range calls {
				delete(tc.(map[string]any), "id")
			}
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}
