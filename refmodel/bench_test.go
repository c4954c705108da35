package refmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// benchConversation is a philosopher's conversation at its fifth decision,
// built as the episode runner builds it, with the choices as the server
// returns them.
func benchConversation(tb testing.TB, rng *rand.Rand, id int) ([]rollout.Message, []json.RawMessage) {
	env := rollout.DefaultEnvConfig()
	msgs := []rollout.Message{{Role: rollout.RoleSystem, Content: rollout.SystemPrompt(env, id)}}
	items := []json.RawMessage{mustMarshal(tb, msgs[0])}
	var last *rollout.LastEvent
	for round := 1; round <= 5; round++ {
		s := rollout.State{Round: round, Rounds: 5, ID: id, N: 5, Last: last,
			Holding: rollout.Sides{Left: rng.IntN(2) == 0}, Free: rollout.Sides{Right: rng.IntN(2) == 0}}
		user := rollout.Message{Role: rollout.RoleUser, Content: rollout.Observation(s)}
		msgs = append(msgs, user)
		items = append(items, mustMarshal(tb, user))
		if round == 5 {
			break
		}
		x := FeaturesOf(&s)
		lp := BasePolicy().LogProbs(&x, 1, AllOutputs)
		a := Pick(&lp, 1, rng.Float64())
		if a == TextOutput {
			a = outThink
		}
		call := rollout.ToolCall{ID: "chatcmpl-tool-0123456789abcdef0123456789abcdef", Type: "function",
			Function: rollout.FunctionCall{Name: rollout.ToolNames[a], Arguments: "{}"}}
		choice := fmt.Sprintf(`{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[%s]},`+
			`"logprobs":{"content":[{"token":%q,"logprob":%v,"bytes":[116,104,105,110,107],"top_logprobs":[]}]},`+
			`"finish_reason":"tool_calls","stop_reason":null}`, mustMarshal(tb, call), tokenStrings[a], lp[a])
		items = append(items, json.RawMessage(choice))
		msgs = append(msgs, rollout.Message{Role: rollout.RoleAssistant, ToolCalls: []rollout.ToolCall{call}})
		tool := rollout.Message{Role: rollout.RoleTool, ToolCallID: call.ID, Content: rollout.ResultText(rollout.ToolNames[a], true)}
		msgs = append(msgs, tool)
		items = append(items, mustMarshal(tb, tool))
		last = &rollout.LastEvent{Action: rollout.ToolNames[a], OK: true}
	}
	return msgs, items
}

func mustMarshal(tb testing.TB, v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func benchChatBody(b *testing.B) []byte {
	msgs, _ := benchConversation(b, rand.New(rand.NewPCG(1, 1)), 3)
	return mustMarshal(b, map[string]any{
		"model": BaseModelName, "messages": msgs, "tools": rollout.Tools(), "tool_choice": "auto",
		"temperature": 1, "logprobs": true, "seed": 42, "max_tokens": 512,
		"chat_template_kwargs": map[string]any{"enable_thinking": false},
	})
}

// BenchmarkChatCompletion measures the server's CPU per completion: the
// handler on a fifth-round request (about 4 KB), no network.
func BenchmarkChatCompletion(b *testing.B) {
	be := mustOpen(b, b.TempDir(), 1)
	h := be.Handler()
	body := benchChatBody(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkChatCompletionHTTP adds a real loopback round trip and client.
func BenchmarkChatCompletionHTTP(b *testing.B) {
	_, srv := mustServe(b, 1)
	body := benchChatBody(b)
	client := &http.Client{}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			var v struct{ ID string }
			json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
}

// BenchmarkTrainJob measures one job on a typical batch: 150 trajectories of
// 5 turns (750 samples), from the request body to the adapter on disk.
func BenchmarkTrainJob(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	req := jobRequest("bench/step-0001", "bench-step-0001", nil)
	for i := range 150 {
		_, items := benchConversation(b, rng, i%5)
		items = items[:len(items)-1] // end on the fifth answer, as sent
		x := FeaturesOf(&rollout.State{Round: 5, Rounds: 5, ID: i % 5, N: 5})
		lp := BasePolicy().LogProbs(&x, 1, AllOutputs)
		items = append(items, choiceItem(tokenStrings[outEat], lp[outEat]))
		req.Trajectories = append(req.Trajectories, trainer.Trajectory{
			MessagesAndChoices: items, Tools: rollout.ToolsJSON(), Advantage: rng.NormFloat64(),
		})
	}
	body := mustMarshal(b, req)
	be := mustOpen(b, b.TempDir(), 1)
	m := be.jobs
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var r trainer.JobRequest
		if err := json.Unmarshal(body, &r); err != nil {
			b.Fatal(err)
		}
		ad, _, err := m.train(context.Background(), &jobEntry{}, &r)
		if err != nil {
			b.Fatal(err)
		}
		if err := ad.Save(filepath.Join(b.TempDir(), r.OutputAdapter)); err != nil {
			b.Fatal(err)
		}
	}
}
