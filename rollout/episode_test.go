package rollout_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

func spec(n int, mode rollout.Mode) rollout.EpisodeSpec {
	env := rollout.DefaultEnvConfig()
	env.N, env.Mode = n, mode
	return rollout.EpisodeSpec{ID: "e1", Model: "scripted", Env: env, Reward: rollout.DefaultRewardConfig(), Sampling: rollout.Sampling{Temperature: 1}}
}

func TestEpisodeOverHTTPWorkedExample(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{}), Limit: rollout.NewLimiter(4)}
	for _, mode := range []rollout.Mode{rollout.Simultaneous, rollout.Sequential} {
		ep := r.Run(context.Background(), spec(5, mode))
		if ep.Errored {
			t.Fatalf("%s: errored: %s", mode, ep.Error)
		}
		if math.Abs(ep.Reward-1.3275) > 1e-9 {
			t.Fatalf("%s: reward %v, want 1.3275", mode, ep.Reward)
		}
		if ep.Metrics.LLMCalls != 25 || ep.Metrics.PromptTokens != 250 || ep.Metrics.OutputTokens != 25 {
			t.Fatalf("%s: calls %d tokens %d/%d", mode, ep.Metrics.LLMCalls, ep.Metrics.PromptTokens, ep.Metrics.OutputTokens)
		}
		// Each transcript: system, then per round user, choice, tool.
		tr := ep.Transcripts[2].MessagesAndChoices
		if len(tr) != 1+3*5 {
			t.Fatalf("%s: transcript has %d items, want 16", mode, len(tr))
		}
		var choice struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			Logprobs struct {
				Content []struct{ Token string } `json:"content"`
			} `json:"logprobs"`
		}
		if err := json.Unmarshal(tr[2], &choice); err != nil {
			t.Fatal(err)
		}
		if choice.Message.ToolCalls[0].Function.Name != rollout.PickUpLeft || choice.Logprobs.Content[0].Token != "token_id:7" {
			t.Fatalf("%s: raw choice not kept: %s", mode, tr[2])
		}
		var tool struct{ Role, Content string }
		json.Unmarshal(tr[3], &tool)
		if tool.Role != "tool" || tool.Content != "ok: pick_up_left succeeded" {
			t.Fatalf("%s: tool message %s", mode, tr[3])
		}
	}
}

func TestEpisodeInvalidOutputsAreCountedNotPlayed(t *testing.T) {
	srv := rollouttest.New(func(s rollout.State) string {
		if s.ID == 1 {
			return `<tool_call>{"name": "eat"</tool_call>`
		}
		return rollout.Think
	})
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{})}
	ep := r.Run(context.Background(), spec(5, rollout.Simultaneous))
	if ep.Errored || ep.Metrics.Invalid != 5 || ep.Metrics.Actions[rollout.Think] != 20 {
		t.Fatalf("errored=%v invalid=%d thinks=%d", ep.Errored, ep.Metrics.Invalid, ep.Metrics.Actions[rollout.Think])
	}
	// shaped: no meal, so no r_nd; 25 idle of 25: -0.1.
	if math.Abs(ep.Reward+0.1) > 1e-12 {
		t.Fatalf("reward %v, want -0.1", ep.Reward)
	}
}

func TestEpisodeFailingServerIsErroredNotScored(t *testing.T) {
	srv := rollouttest.New(func(rollout.State) string { return rollout.Think })
	srv.Fail = func(int64) int { return http.StatusInternalServerError }
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{Retry: &httpx.Policy{Retries: 2, BaseDelay: time.Millisecond}})}
	ep := r.Run(context.Background(), spec(5, rollout.Simultaneous))
	if !ep.Errored || ep.Reward != 0 || ep.Metrics.Errors != 1 {
		t.Fatalf("errored=%v reward=%v errors=%d", ep.Errored, ep.Reward, ep.Metrics.Errors)
	}
	if !strings.Contains(ep.Error, srv.BaseURL()) || !strings.Contains(ep.Error, "3 attempt(s)") {
		t.Fatalf("error %q should name the URL and the attempts", ep.Error)
	}
}

func TestEpisodeRetriesTransientFailures(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	srv.Fail = func(call int64) int {
		if call%7 == 0 {
			return http.StatusTooManyRequests
		}
		return 0
	}
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{Retry: &httpx.Policy{Retries: 3, BaseDelay: time.Millisecond}})}
	ep := r.Run(context.Background(), spec(5, rollout.Simultaneous))
	if ep.Errored || math.Abs(ep.Reward-1.3275) > 1e-9 {
		t.Fatalf("errored=%v (%s) reward=%v", ep.Errored, ep.Error, ep.Reward)
	}
}

func TestRequestSeedDiffers(t *testing.T) {
	seen := map[int64]bool{}
	for id := range 5 {
		for round := 1; round <= 5; round++ {
			seen[rollout.RequestSeed(42, id, round)] = true
		}
	}
	if len(seen) != 25 {
		t.Fatalf("%d distinct seeds for 25 calls", len(seen))
	}
	if rollout.RequestSeed(1, 0, 1) == rollout.RequestSeed(2, 0, 1) {
		t.Fatal("sample seed does not change request seeds")
	}
}

// TestNoTranscriptsPlaysTheSameEpisode: an episode that keeps no
// transcript sends the same requests and scores the same as one that
// keeps it.
func TestNoTranscriptsPlaysTheSameEpisode(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{}), Limit: rollout.NewLimiter(4)}
	for _, mode := range []rollout.Mode{rollout.Simultaneous, rollout.Sequential} {
		kept := r.Run(context.Background(), spec(5, mode))
		sp := spec(5, mode)
		sp.NoTranscripts = true
		bare := r.Run(context.Background(), sp)
		if kept.Errored || bare.Errored {
			t.Fatalf("%s: errored: %q %q", mode, kept.Error, bare.Error)
		}
		if len(kept.Transcripts) != 5 || bare.Transcripts != nil {
			t.Fatalf("%s: %d transcripts kept, %d without; want 5 and none", mode, len(kept.Transcripts), len(bare.Transcripts))
		}
		if bare.Reward != kept.Reward || bare.Terms != kept.Terms || !reflect.DeepEqual(bare.Metrics, kept.Metrics) || math.Abs(bare.Reward-1.3275) > 1e-9 {
			t.Fatalf("%s: without transcripts reward %v metrics %+v; with %v %+v (want 1.3275)", mode, bare.Reward, bare.Metrics, kept.Reward, kept.Metrics)
		}
	}
}
