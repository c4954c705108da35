package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/server"
)

// storeRun records a finished run of two steps with real adapters under
// dir, on the given inference endpoints (none: the embedded backend).
// Validation makes step 2 the best. It returns the adapter paths by step.
func storeRun(t *testing.T, store *checkpoint.Store, dir, name string, endpoints ...string) map[int]string {
	t.Helper()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = name, 2
	for _, u := range endpoints {
		cfg.Inference.Endpoints = append(cfg.Inference.Endpoints, config.Endpoint{URL: u})
	}
	ctx := context.Background()
	if err := store.CreateRun(ctx, checkpoint.Run{Name: name, Config: cfg.JSON(), Steps: 2, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	paths := map[int]string{}
	for step, r := range []float64{0.1, 0.2, 0.6} {
		s := checkpoint.Step{Step: step, N: 5}
		if step > 0 {
			a, err := refmodel.NewAdapter(2, 4, uint64(step))
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, fmt.Sprintf("%s-step-%04d", name, step))
			if err := a.Save(p); err != nil {
				t.Fatal(err)
			}
			paths[step] = p
			s.Adapter = &checkpoint.Adapter{Name: filepath.Base(p), Path: p}
		}
		if err := store.CommitStep(ctx, name, s, &checkpoint.Evaluation{Step: step, Episodes: 4, RewardMean: r}); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

func TestPromoteRoute(t *testing.T) {
	b := refBackend(t)
	vllm := httptest.NewServer(b.InferenceHandler())
	defer vllm.Close()

	e := newEnv(t)
	paths := storeRun(t, e.store, t.TempDir(), "live", vllm.URL+"/v1")
	storeRun(t, e.store, t.TempDir(), "gone") // on the embedded backend
	s := e.MustStart(t, server.Options{Token: "s3cret"})
	url := s.URL() + "/api/v1/runs/live/promote"

	// Token-protected like every mutating endpoint.
	for _, tok := range []string{"", "wrong"} {
		if code, body := do(t, "POST", url, tok, ""); code != http.StatusUnauthorized {
			t.Fatalf("promote with token %q = %d %s, want 401", tok, code, body)
		}
	}
	served := func() string {
		models, err := inference.NewAdminClient(vllm.URL+"/v1", inference.AdminOptions{}).Models(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range models {
			if m.ID == "live-best" {
				return m.Root
			}
		}
		return ""
	}
	if served() != "" {
		t.Fatal("live-best served before any promotion")
	}
	code, body := do(t, "POST", url, "s3cret", "")
	var res promote.Result
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("promote = %d %s", code, body)
	}
	if res.Name != "live-best" || res.Step != 2 || res.SelectedBy != "best" || len(res.Endpoints) != 1 ||
		res.Endpoints[0].Action != promote.ActionLoaded || res.Endpoints[0].URL != vllm.URL+"/v1" {
		t.Fatalf("result %+v", res)
	}
	if got := served(); got != paths[2] {
		t.Fatalf("live-best served from %q, want %s", got, paths[2])
	}
	// Again, another step: in place.
	code, body = do(t, "POST", url, "s3cret", `{"step": "1"}`)
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Endpoints[0].Action != promote.ActionReplaced || res.Endpoints[0].Before != paths[2] {
		t.Fatalf("second promote = %d %s", code, body)
	}
	if got := served(); got != paths[1] {
		t.Fatalf("live-best served from %q, want %s", got, paths[1])
	}
	// Another name.
	if code, body := do(t, "POST", url, "s3cret", `{"as": "prod"}`); code != http.StatusOK || !contains(body, `"name": "prod"`) {
		t.Fatalf("promote as prod = %d %s", code, body)
	}
	// The step as a number, in JSON and in YAML.
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"as": "json-num", "step": 2}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	jb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(jb, &res) != nil || res.Name != "json-num" || res.Step != 2 {
		t.Fatalf(`promote {"step": 2} as JSON = %d %s`, resp.StatusCode, jb)
	}
	if code, body := do(t, "POST", url, "s3cret", "as: yaml-num\nstep: 1\n"); code != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Name != "yaml-num" || res.Step != 1 {
		t.Fatalf("promote step: 1 as YAML = %d %s", code, body)
	}

	for _, c := range []struct {
		url, body string
		code      int
		says      string
	}{
		{url, `{"as": "no spaces"}`, http.StatusBadRequest, "no spaces"},
		{url, `{"as": "other.0123456789abcdef-step-0001"}`, http.StatusBadRequest, "the form of a run's own adapter names"},
		{url, `{"as": "other.0123456789abcdef"}`, http.StatusBadRequest, "the form of a run's own adapter names"},
		{url, `{"as": "Qwen/Qwen3-14B"}`, http.StatusBadRequest, `as: name \"Qwen/Qwen3-14B\" is the base model's name`},
		{url, `{"step": [1]}`, http.StatusBadRequest, "step: want"},
		{url, `{"step": "soon"}`, http.StatusBadRequest, "soon"},
		{url, `{"endpoint": "http://10.0.0.1/v1"}`, http.StatusBadRequest, "endpoint"},
		{url, `{"step": "0"}`, http.StatusConflict, "base model"},
		{url, `{"step": "7"}`, http.StatusConflict, "no committed step 7"},
		{s.URL() + "/api/v1/runs/gone/promote", "", http.StatusConflict, "grpo refmodel serve"},
		{s.URL() + "/api/v1/runs/nope/promote", "", http.StatusNotFound, "nope"},
	} {
		code, body := do(t, "POST", c.url, "s3cret", c.body)
		if code != c.code || !contains(body, c.says) {
			t.Errorf("POST %s %s = %d %s, want %d saying %q", c.url, c.body, code, body, c.code, c.says)
		}
	}
}
