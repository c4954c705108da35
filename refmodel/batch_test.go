package refmodel

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

func userItem(s rollout.State) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"role": "user", "content": rollout.Observation(s)})
	return b
}

func choiceItem(token string, logprob float64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"index":         0,
		"message":       map[string]any{"role": "assistant", "content": nil},
		"finish_reason": "tool_calls",
		"logprobs":      map[string]any{"content": []map[string]any{{"token": token, "logprob": logprob}}},
	})
	return b
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

func goodTrajectory() trainer.Trajectory {
	return trainer.Trajectory{
		MessagesAndChoices: []json.RawMessage{
			raw(`{"role":"system","content":"rules"}`),
			userItem(stateFirstRound),
			choiceItem("token_id:1000", -0.25),
			raw(`{"role":"tool","tool_call_id":"x","content":"ok"}`),
			userItem(stateWaitingRight),
			choiceItem("token_id:1006", -3.5),
		},
		Tools:     rollout.ToolsJSON(),
		Advantage: 0.75,
	}
}

func TestSamplesOf(t *testing.T) {
	got, err := SamplesOf([]trainer.Trajectory{goodTrajectory()})
	if err != nil {
		t.Fatal(err)
	}
	want := []Sample{
		{X: FeaturesOf(&stateFirstRound), Mask: AllOutputs, Action: outPickUpLeft, OldLogProb: -0.25, Advantage: 0.75},
		{X: FeaturesOf(&stateWaitingRight), Mask: AllOutputs, Action: TextOutput, OldLogProb: -3.5, Advantage: 0.75},
	}
	if len(got) != len(want) {
		t.Fatalf("%d samples, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("sample %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSamplesOfMalformed(t *testing.T) {
	good := goodTrajectory()
	for _, tc := range []struct {
		name string
		edit func(tr *trainer.Trajectory)
		want string
	}{
		{"no choices", func(tr *trainer.Trajectory) { tr.MessagesAndChoices = tr.MessagesAndChoices[:2] },
			"trajectory 1: no sampled choices"},
		{"token not token_id", func(tr *trainer.Trajectory) { tr.MessagesAndChoices[2] = choiceItem("pick", -1) },
			`trajectory 1, messages_and_choices[2]: logprobs token "pick" is not of the form token_id:<n>`},
		{"unknown token id", func(tr *trainer.Trajectory) { tr.MessagesAndChoices[2] = choiceItem("token_id:17", -1) },
			`trajectory 1, messages_and_choices[2]: logprobs token "token_id:17" is not one of the policy's tokens`},
		{"choice before any state", func(tr *trainer.Trajectory) {
			tr.MessagesAndChoices = append([]json.RawMessage{tr.MessagesAndChoices[0], tr.MessagesAndChoices[2]}, tr.MessagesAndChoices[1:]...)
		}, "trajectory 1, messages_and_choices[1]: choice has no user message with a state line before it"},
		{"user message without state", func(tr *trainer.Trajectory) {
			tr.MessagesAndChoices[4] = raw(`{"role":"user","content":"What now?"}`)
		}, "trajectory 1, messages_and_choices[5]: the user message before this choice has no state line"},
		{"no logprobs", func(tr *trainer.Trajectory) {
			tr.MessagesAndChoices[2] = raw(`{"index":0,"message":{"role":"assistant"},"logprobs":null}`)
		}, "trajectory 1, messages_and_choices[2]: choice has no logprobs"},
		{"positive logprob", func(tr *trainer.Trajectory) { tr.MessagesAndChoices[2] = choiceItem("token_id:1000", 0.5) },
			"trajectory 1, messages_and_choices[2]: logprob"},
		{"neither message nor choice", func(tr *trainer.Trajectory) { tr.MessagesAndChoices[3] = raw(`{"foo":1}`) },
			"trajectory 1, messages_and_choices[3]: neither a message"},
		{"not json object", func(tr *trainer.Trajectory) { tr.MessagesAndChoices[3] = raw(`[1]`) },
			"trajectory 1, messages_and_choices[3]:"},
		{"tool not offered", func(tr *trainer.Trajectory) {
			tr.Tools = raw(`[{"type":"function","function":{"name":"think"}}]`)
		}, "trajectory 1, messages_and_choices[2]: output pick_up_left is not among the trajectory's tools"},
		{"token ids disagree", func(tr *trainer.Trajectory) {
			tr.MessagesAndChoices[2] = raw(`{"index":0,"message":{"role":"assistant"},"token_ids":[1001],"logprobs":{"content":[{"token":"token_id:1000","logprob":-1}]}}`)
		}, `trajectory 1, messages_and_choices[2]: token_ids [1001] do not match the logprobs token "token_id:1000"`},
		{"advantage not finite", func(tr *trainer.Trajectory) { tr.Advantage = math.Inf(1) },
			"trajectory 1: advantage is not a finite number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := goodTrajectory()
			bad.MessagesAndChoices = append([]json.RawMessage(nil), bad.MessagesAndChoices...)
			tc.edit(&bad)
			_, err := SamplesOf([]trainer.Trajectory{good, bad})
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %q, want prefix %q", err, tc.want)
			}
			var te *TrajectoryError
			if !errors.As(err, &te) || te.Index != 1 {
				t.Fatalf("error %v is not a TrajectoryError for index 1", err)
			}
		})
	}
}

// FuzzSamplesOf: untrusted trajectories never panic, and what they yield is
// well formed.
func FuzzSamplesOf(f *testing.F) {
	tr := goodTrajectory()
	for _, it := range tr.MessagesAndChoices {
		f.Add(string(it), 0.5)
	}
	f.Add(`{"logprobs":{"content":[{"token":"token_id:1003","logprob":-1e308}]}}`, -2.0)
	f.Fuzz(func(t *testing.T, item string, adv float64) {
		tr := goodTrajectory()
		tr.MessagesAndChoices = append(tr.MessagesAndChoices[:2:2], json.RawMessage(item))
		tr.Advantage = adv
		samples, err := SamplesOf([]trainer.Trajectory{tr})
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.Action < 0 || s.Action >= NumOutputs || !s.Mask.Has(s.Action) || s.OldLogProb > 0 || math.IsNaN(s.OldLogProb) {
				t.Fatalf("bad sample %+v from %q", s, item)
			}
		}
	})
}
