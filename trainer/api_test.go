package trainer

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// TestJobClient_SendsOptimizerHyperparameters decodes the create body a
// trainer received: mini_batches, warmup_steps and reset_optimizer are on
// the wire under their DESIGN §5 names, beside the older keys.
func TestJobClient_SendsOptimizerHyperparameters(t *testing.T) {
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		writeJSON(w, http.StatusAccepted, Job{ID: "dp5/step-0003", State: StateQueued})
	}))
	defer srv.Close()
	req := testRequest("dp5/step-0003")
	req.Hyperparameters.MiniBatches, req.Hyperparameters.WarmupSteps, req.Hyperparameters.ResetOptimizer = 4, 10, true
	if _, err := NewJobClient(srv.URL, fastOptions()).Submit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Hyperparameters map[string]any `json:"hyperparameters"`
	}
	if err := json.Unmarshal(<-bodies, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"learning_rate": 5e-6, "epsilon": 0.2, "epsilon_high": 0.2, "kl_beta": 0.0, "epochs": 1.0,
		"mini_batches": 4.0, "warmup_steps": 10.0, "reset_optimizer": true}
	if !reflect.DeepEqual(got.Hyperparameters, want) {
		t.Fatalf("sent hyperparameters %v, want %v", got.Hyperparameters, want)
	}

	// The defaults are sent too; only an unset mini_batches (a request
	// stored before the key existed) is left out, for the trainer's 1.
	b, _ := json.Marshal(Hyperparameters{LearningRate: 1, Epochs: 1})
	if got, want := string(b), `{"learning_rate":1,"epsilon":0,"epsilon_high":0,"kl_beta":0,"epochs":1,"warmup_steps":0,"reset_optimizer":false}`; got != want {
		t.Fatalf("JSON %s, want %s", got, want)
	}
}

// TestJobMetrics_Diagnostics reads a job's metrics as a trainer sends
// them: a reported 0 is kept (a gap of 0 is the good case), a diagnostic
// not sent has no key in Map.
func TestJobMetrics_Diagnostics(t *testing.T) {
	var j Job
	body := `{"id":"j","state":"succeeded","metrics":{"loss":0.5,"kl":0.01,"grad_norm":2,"clip_fraction":0.125,
		"optimizer_step":3.0,"sampler_logprob_gap":0,"update_norm":0.0625}}`
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatal(err)
	}
	got := j.Metrics.Map()
	want := map[string]float64{"loss": 0.5, "kl": 0.01, "grad_norm": 2, "clip_fraction": 0.125,
		"optimizer_step": 3, "sampler_logprob_gap": 0, "update_norm": 0.0625}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Map()=%v, want %v (no entropy: not sent)", got, want)
	}
	// An old trainer's metrics: the four of before, no diagnostics.
	if got := (Metrics{Loss: 1}).Map(); len(got) != 4 {
		t.Fatalf("Map() of an old trainer's metrics=%v, want loss, kl, grad_norm, clip_fraction only", got)
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
