package trainer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/grpo"
)

func TestTrajectorySamplingJSON(t *testing.T) {
	step := 3
	tr := Trajectory{Group: "g", Episode: "e", Agent: 1,
		Sampling:   &Sampling{Model: "run-step-0003", Temperature: 0, TopP: 1, MaxTokens: 512, ChatTemplateKwargs: map[string]any{"enable_thinking": false}},
		PolicyStep: &step}
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	want := `"sampling":{"model":"run-step-0003","temperature":0,"top_p":1,"max_tokens":512,"chat_template_kwargs":{"enable_thinking":false}},"policy_step":3}`
	if !strings.HasSuffix(string(b), want) {
		t.Fatalf("JSON %s\nwant it to end with %s", b, want)
	}
	// Both are additive: absent, an old trainer's body is unchanged.
	b, _ = json.Marshal(Trajectory{Group: "g"})
	if strings.Contains(string(b), "sampling") || strings.Contains(string(b), "policy_step") {
		t.Fatalf("JSON %s carries unset sampling fields", b)
	}
}

// TestTrajectoriesWire: a domain trajectory's float32 sampling settings
// are sent at the precision they were sampled with (0.7, not
// 0.699999988), greedy as temperature 0, and no policy_step when unset.
func TestTrajectoriesWire(t *testing.T) {
	trs := Trajectories([]grpo.Trajectory{{Group: "g1", Episode: "a", Agent: 1, Reward: 1, Advantage: 0.5,
		Sampling: grpo.Sampling{Model: "o3-baseline-step-0001", Temperature: 0.7, TopP: 1, MaxTokens: 512, ChatTemplateKwargs: map[string]any{"enable_thinking": false}}}})
	got, err := json.Marshal(trs[0])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"messages_and_choices":null,"reward":1,"advantage":0.5,"group":"g1","episode":"a","agent":1,"sampling":{"model":"o3-baseline-step-0001","temperature":0.7,"top_p":1,"max_tokens":512,"chat_template_kwargs":{"enable_thinking":false}}}`
	if string(got) != want {
		t.Fatalf("trajectory JSON %s\nwant %s", got, want)
	}
	for _, tt := range []struct {
		in   float32
		want float64
	}{{0, 0}, {0.3, 0.3}, {0.95, 0.95}, {1, 1}} {
		if got := wire32(tt.in); got != tt.want {
			t.Errorf("wire32(%v)=%v, want %v", tt.in, got, tt.want)
		}
	}
}
