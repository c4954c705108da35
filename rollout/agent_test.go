package rollout_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

func TestCompletionForwarded(t *testing.T) {
	for _, tt := range []struct{ raw, ids, want string }{
		{`{"index":0,"finish_reason":"stop"}`, `[1,2]`, `{"index":0,"finish_reason":"stop","prompt_token_ids":[1,2]}`},
		{`{"index":0} ` + "\n", `[3]`, `{"index":0,"prompt_token_ids":[3]}`},
		{`{}`, `[4]`, `{"prompt_token_ids":[4]}`},
		{`{"index":0}`, ``, `{"index":0}`}, // no ids: the choice as returned
	} {
		c := &rollout.Completion{Raw: json.RawMessage(tt.raw), PromptTokenIDs: json.RawMessage(tt.ids)}
		if got := string(c.Forwarded()); got != tt.want {
			t.Errorf("Forwarded(%q, %q)=%s, want %s", tt.raw, tt.ids, got, tt.want)
		}
	}
}

// completerFunc is a Completer from a function.
type completerFunc func(context.Context, *rollout.Request) (*rollout.Completion, error)

func (f completerFunc) Complete(ctx context.Context, r *rollout.Request) (*rollout.Completion, error) {
	return f(ctx, r)
}

func TestEpisodeCountsTruncatedTurns(t *testing.T) {
	var calls atomic.Int64
	var temps []float32
	c := completerFunc(func(_ context.Context, r *rollout.Request) (*rollout.Completion, error) {
		temps = append(temps, r.Temperature)
		ch := rollout.Choice{FinishReason: "tool_calls", Message: rollout.Message{
			Role: rollout.RoleAssistant, ToolCalls: []rollout.ToolCall{{ID: "t", Type: "function", Function: rollout.FunctionCall{Name: rollout.Think, Arguments: "{}"}}},
		}}
		if calls.Add(1)%2 == 1 {
			ch.FinishReason = rollout.FinishLength // a complete call, but cut: invalid
		}
		raw, _ := json.Marshal(map[string]any{"index": 0, "message": ch.Message, "finish_reason": ch.FinishReason})
		return &rollout.Completion{Choice: ch, Raw: raw}, nil
	})
	s := spec(2, rollout.Sequential)
	s.Sampling.Temperature = 0
	ep := (&rollout.Runner{Client: c}).Run(context.Background(), s)
	if ep.Errored {
		t.Fatal(ep.Error)
	}
	// 2 philosophers, 5 rounds: 10 calls, the odd ones cut.
	if ep.Metrics.LLMCalls != 10 || ep.Metrics.Truncated != 5 || ep.Metrics.Invalid != 5 || ep.Metrics.Actions[rollout.Think] != 5 {
		t.Fatalf("calls=%d truncated=%d invalid=%d thinks=%d, want 10, 5, 5, 5", ep.Metrics.LLMCalls, ep.Metrics.Truncated, ep.Metrics.Invalid, ep.Metrics.Actions[rollout.Think])
	}
	for _, temp := range temps {
		if temp != 0 {
			t.Fatalf("temperature %v sent, want 0 (greedy is 0, not a tiny number)", temp)
		}
	}
}

// TestRunAllStopsWhenCancelled: once its context ends, RunAll starts no
// further episode (a daemon's cancel of a validation of 258,048 episodes
// went on building every one of them); those never started are errored.
func TestRunAllStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	c := completerFunc(func(ctx context.Context, _ *rollout.Request) (*rollout.Completion, error) {
		calls.Add(1)
		cancel() // the run is cancelled while its first call is in flight
		return nil, ctx.Err()
	})
	specs := make([]rollout.EpisodeSpec, 1000)
	for i := range specs {
		specs[i] = spec(2, rollout.Sequential)
	}
	eps := (&rollout.Runner{Client: c}).RunAll(ctx, specs, 2, nil)
	if n := calls.Load(); n > 10 {
		t.Errorf("%d calls after the cancel, from %d episodes: want only those of the episodes already started", n, len(specs))
	}
	for i, ep := range eps {
		if !ep.Errored || ep.Error == "" {
			t.Fatalf("episode %d after the cancel: %+v, want errored", i, ep)
		}
	}
}
