package trainer

import (
	"encoding/json"
	"strings"
	"testing"
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
