package art

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/trainer"
)

func testModel() Model {
	return Model{
		Name:      "dp5-shaped",
		Project:   "grpo",
		BaseModel: "Qwen/Qwen3-14B",
		LoRA:      trainer.LoRA{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}},
	}
}

func TestCheckDetectsReleases(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    Protocol
	}{
		// testdata/openapi-<release>.json: captured from each release's own
		// app (.ci/art/harness.py --dump-openapi).
		{"0.4.0", Protocol{Releases: "0.4.0 to 0.4.3", Log: true}},
		{"0.4.12", Protocol{Releases: "0.4.8 to 0.5.0", Log: true, ScaleRewards: true, TrainsMessages: true}},
		{"0.5.0", Protocol{Releases: "0.4.8 to 0.5.0", Log: true, ScaleRewards: true, TrainsMessages: true}},
	} {
		t.Run(tc.release, func(t *testing.T) {
			f := newFake(t, tc.release)
			got, err := f.client(t).Check(context.Background())
			if err != nil {
				t.Fatalf("Check()=%v", err)
			}
			if got != tc.want {
				t.Fatalf("Check()=%+v, want %+v", got, tc.want)
			}
			if n := len(f.bodies("/healthcheck")); n != 1 {
				t.Fatalf("healthcheck asked %d times, want 1", n)
			}
		})
	}
}

func TestCheckRefusesUnsupported(t *testing.T) {
	for _, tc := range []struct {
		release string
		found   string // a part of the message naming what was found
	}{
		{"0.3.11", "0.3.x"},
		{"0.5.3", "openpipe-art 0.5.1 to 0.5.17 (Trajectory.auto_metrics found)"},
	} {
		t.Run(tc.release, func(t *testing.T) {
			f := newFake(t, tc.release)
			_, err := f.client(t).Check(context.Background())
			var ve *VersionError
			if !errors.As(err, &ve) || !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("Check()=%v, want a *VersionError", err)
			}
			msg := err.Error()
			for _, want := range []string{tc.found, "supported: the `art run` backend server of openpipe-art 0.4.0 to 0.5.0", f.srv.URL} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if n := len(f.bodies("/healthcheck")); n != 0 {
				t.Errorf("healthcheck asked %d times after a refused version, want 0", n)
			}
		})
	}
}

func TestCheckRefusesNonART(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve http.HandlerFunc
		want  string
	}{
		{"no paths", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"paths": {}}`)) }, "no GET /healthcheck"},
		{"html", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`<html>vLLM</html>`)) }, "/openapi.json is not an OpenAPI document"},
		{"404", http.NotFound, "no /openapi.json (404)"},
		// ART 0.5.9 to 0.5.18: FastAPI cannot build the schema.
		{"500", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		}, "it looks like openpipe-art 0.5.9 or later"},
		{"0.5.18", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"paths": {"/healthcheck": {"get": {}}, "/register": {"post": {}}}}`))
		}, "0.5.18 and later no longer train"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, "0.4.12")
			f.srv.Config.Handler = tc.serve
			_, err := f.client(t).Check(context.Background())
			if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), SupportedRange) {
				t.Fatalf("Check()=%v, want a version error containing %q and the supported range", err, tc.want)
			}
		})
	}
}

func TestCheckRetriesGETButPOSTIsNotRetried(t *testing.T) {
	f := newFake(t, "0.4.12")
	f.failures["/openapi.json"] = 2
	c := f.client(t)
	if _, err := c.Check(context.Background()); err != nil {
		t.Fatalf("Check()=%v after two 503s, want success", err)
	}
	if got, want := len(f.bodies("/openapi.json")), 3; got != want {
		t.Fatalf("/openapi.json asked %d times, want %d", got, want)
	}
	f.failures["/register"] = 1
	err := c.Register(context.Background(), testModel())
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("Register()=%v, want the 503", err)
	}
	if got := len(f.bodies("/register")); got != 1 {
		t.Fatalf("/register sent %d times, want 1 (POSTs are not retried)", got)
	}
}

// decode unmarshals a recorded body into a generic map.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	return m
}

// checkModelJSON checks a model object field by field.
func checkModelJSON(t *testing.T, m map[string]any) {
	t.Helper()
	for k, want := range map[string]any{
		"name": "dp5-shaped", "project": "grpo", "base_model": "Qwen/Qwen3-14B", "trainable": true, "config": nil,
	} {
		if got, ok := m[k]; !ok || got != want {
			t.Errorf("model[%q]=%v (present %v), want %v", k, got, ok, want)
		}
	}
	ic, _ := m["_internal_config"].(map[string]any)
	peft, _ := ic["peft_args"].(map[string]any)
	if peft == nil {
		t.Fatalf("model has no _internal_config.peft_args: %v", m)
	}
	if got, want := peft["r"], 8.0; got != want {
		t.Errorf("peft_args.r=%v, want %v", got, want)
	}
	if got, want := peft["lora_alpha"], 16.0; got != want {
		t.Errorf("peft_args.lora_alpha=%v, want %v", got, want)
	}
	if got, want := peft["target_modules"], []any{"q_proj", "k_proj", "v_proj", "o_proj"}; !reflect.DeepEqual(got, want) {
		t.Errorf("peft_args.target_modules=%v, want %v", got, want)
	}
	// ART's max_lora_rank defaults to 8: it is always sent as the rank.
	if got, want := ic["init_args"], map[string]any{"max_lora_rank": 8.0}; !reflect.DeepEqual(got, want) {
		t.Errorf("init_args=%v, want %v", got, want)
	}
}

func TestRegisterSendsTheModelItself(t *testing.T) {
	f := newFake(t, "0.5.0")
	if err := f.client(t).Register(context.Background(), testModel()); err != nil {
		t.Fatalf("Register()=%v", err)
	}
	bodies := f.bodies("/register")
	if len(bodies) != 1 {
		t.Fatalf("/register sent %d times, want 1", len(bodies))
	}
	m := decode(t, bodies[0].Body)
	checkModelJSON(t, m)
	if got, want := len(m), 6; got != want {
		t.Errorf("model has %d keys, want %d: %v", got, want, m)
	}
}

func TestModelValidate(t *testing.T) {
	m := testModel()
	m.LoRA.Alpha = 16.5
	if err := m.Validate(); err == nil || !strings.Contains(err.Error(), "lora alpha 16.5") {
		t.Fatalf("Validate()=%v, want an error naming alpha 16.5", err)
	}
	m = testModel()
	m.Name = "run@3"
	if err := m.Validate(); err == nil {
		t.Fatalf("Validate() accepted the name %q", m.Name)
	}
	m = testModel()
	m.MaxSeqLength = 8192
	m.LoRA.Rank = 32
	b, _ := json.Marshal(m)
	if !strings.Contains(string(b), `"init_args":{"max_lora_rank":32,"max_seq_length":8192}`) {
		t.Fatalf("model JSON %s lacks init_args max_lora_rank 32, max_seq_length 8192", b)
	}
}

func TestPrepareRewritesUnspecifiedHost(t *testing.T) {
	f := newFake(t, "0.4.12")
	c := f.client(t)
	u, key, err := c.Prepare(context.Background(), testModel())
	if err != nil {
		t.Fatalf("Prepare()=%v", err)
	}
	if got, want := u, "http://127.0.0.1:8000/v1"; got != want {
		t.Fatalf("Prepare() base URL=%q, want %q", got, want)
	}
	if got, want := key, "default"; got != want {
		t.Fatalf("Prepare() key=%q, want %q", got, want)
	}
	body := decode(t, f.bodies("/_prepare_backend_for_training")[0].Body)
	if cfg, ok := body["config"]; !ok || cfg != nil {
		t.Errorf("config=%v (present %v), want null", cfg, ok)
	}
	checkModelJSON(t, body["model"].(map[string]any))

	// With server args, ART binds where asked and answers its host.
	f = newFake(t, "0.5.0")
	f.prepare = []string{"http://localhost:41234/v1", "sk-art"}
	c, _ = New(f.srv.URL, Options{ServerArgs: map[string]any{"port": 41234, "api_key": "sk-art"}})
	u, key, err = c.Prepare(context.Background(), testModel())
	if err != nil || u != "http://127.0.0.1:41234/v1" || key != "sk-art" {
		t.Fatalf("Prepare()=%q, %q, %v; want http://127.0.0.1:41234/v1, sk-art", u, key, err)
	}
	body = decode(t, f.bodies("/_prepare_backend_for_training")[0].Body)
	want := map[string]any{"server_args": map[string]any{"port": 41234.0, "api_key": "sk-art"}}
	if !reflect.DeepEqual(body["config"], want) {
		t.Fatalf("config=%v, want %v", body["config"], want)
	}
}

func TestRewriteHost(t *testing.T) {
	for _, tc := range []struct{ base, in, want string }{
		{"http://art.internal:7999", "http://0.0.0.0:8000/v1", "http://art.internal:8000/v1"},
		{"http://art.internal:7999", "http://127.0.0.1:8000/v1", "http://art.internal:8000/v1"},
		{"http://art.internal:7999", "http://[::]:8000/v1", "http://art.internal:8000/v1"},
		{"http://[::1]:7999", "http://0.0.0.0:8000/v1", "http://[::1]:8000/v1"},
		{"http://art.internal:7999", "http://10.0.0.5:8000/v1", "http://10.0.0.5:8000/v1"}, // a named address is kept
	} {
		c, err := New(tc.base, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.rewriteHost(tc.in); err != nil || got != tc.want {
			t.Errorf("rewriteHost(%q) at %s = %q, %v; want %q", tc.in, tc.base, got, err, tc.want)
		}
	}
}

func TestStepForResume(t *testing.T) {
	f := newFake(t, "0.4.12")
	f.step = 5
	c := f.client(t)
	got, err := c.Step(context.Background(), testModel())
	if err != nil || got != 5 {
		t.Fatalf("Step()=%d, %v; want 5", got, err)
	}
	checkModelJSON(t, decode(t, f.bodies("/_get_step")[0].Body))
	// /_get_step only reads: a 503 is retried.
	f.failures["/_get_step"] = 1
	if got, err := c.Step(context.Background(), testModel()); err != nil || got != 5 {
		t.Fatalf("Step() after a 503 = %d, %v; want 5", got, err)
	}
}

func TestInferenceModel(t *testing.T) {
	for release, want := range map[string]string{"0.4.0": "dp5-shaped", "0.5.0": "dp5-shaped"} {
		f := newFake(t, release)
		if got, err := f.client(t).InferenceModel(context.Background(), testModel(), 3); err != nil || got != want {
			t.Errorf("%s: InferenceModel(3)=%q, %v; want %q", release, got, err, want)
		}
	}
}

func TestDeleteOnOldServerNeverLosesBest(t *testing.T) {
	f := newFake(t, "0.4.12")
	for s := 0; s <= 6; s++ {
		f.checkpoints[s] = true
	}
	f.step, f.artBest = 6, 5
	c := f.client(t)
	_, err := c.DeleteCheckpoints(context.Background(), testModel(), []int{3})
	var ke *KeepError
	if !errors.As(err, &ke) || !errors.Is(err, ErrCannotKeep) || !slices.Equal(ke.Keep, []int{3}) || ke.Latest != 6 {
		t.Fatalf("DeleteCheckpoints(keep 3)=%v, want a *KeepError for step 3", err)
	}
	if n := len(f.bodies("/_delete_checkpoints")); n != 0 || len(f.checkpoints) != 7 {
		t.Fatalf("sent %d deletions, %d checkpoints left; want none sent, 7 left", n, len(f.checkpoints))
	}
	// Keeping only the latest is safe: ART keeps it (and its own best).
	kept, err := c.DeleteCheckpoints(context.Background(), testModel(), []int{6})
	if err != nil || !slices.Equal(kept, []int{6}) {
		t.Fatalf("DeleteCheckpoints(keep 6)=%v, %v; want [6]", kept, err)
	}
	reqs := f.bodies("/_delete_checkpoints")
	if len(reqs) != 1 || reqs[0].Query != "benchmark=val%2Freward&benchmark_smoothing=1" {
		t.Fatalf("deletion requests %+v, want one with benchmark=val/reward, smoothing 1", reqs)
	}
	checkModelJSON(t, decode(t, reqs[0].Body))
	if len(f.checkpoints) != 2 || !f.checkpoints[5] || !f.checkpoints[6] {
		t.Fatalf("checkpoints left %v, want 5 and 6", f.checkpoints)
	}
}

func TestLog(t *testing.T) {
	trajs := stepTrajectories(t)
	groups, err := LogGroups(trajs)
	if err != nil {
		t.Fatal(err)
	}
	f := newFake(t, "0.4.12")
	if err := f.client(t).Log(context.Background(), testModel(), groups, "val"); err != nil {
		t.Fatalf("Log()=%v", err)
	}
	body := decode(t, f.bodies("/_log")[0].Body)
	if body["split"] != "val" {
		t.Errorf("split=%v, want val", body["split"])
	}
	tg := body["trajectory_groups"].([]any)[0].(map[string]any)["trajectories"].([]any)
	var rewards []float64
	for _, tr := range tg {
		rewards = append(rewards, tr.(map[string]any)["reward"].(float64))
	}
	// Validation logs the episode rewards, not the advantages.
	if want := []float64{0.2, 0.2, 0.5, 0.5, 0.8, 0.8}; !slices.Equal(rewards, want) {
		t.Fatalf("logged rewards %v, want %v", rewards, want)
	}

	// /_log reads no logprobs: a choice without them is logged.
	trajs[0].MessagesAndChoices[2] = json.RawMessage(`{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":null}`)
	if _, err := LogGroups(trajs); err != nil {
		t.Fatalf("LogGroups() with a choice without logprobs = %v", err)
	}
}

func TestStatusErrorNamesValidationErrors(t *testing.T) {
	got := detail([]byte(`{"detail":[{"type":"missing","loc":["body","model","base_model"],"msg":"Field required","input":null}]}`))
	if want := "body.model.base_model: Field required"; got != want {
		t.Fatalf("detail()=%q, want %q", got, want)
	}
	if got, want := detail([]byte(`{"detail":"Model not registered"}`)), "Model not registered"; got != want {
		t.Fatalf("detail()=%q, want %q", got, want)
	}
}

func TestOccupant(t *testing.T) {
	var models string
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer default" {
			http.Error(w, "unexpected", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, models)
	}))
	defer vllm.Close()
	_, port, _ := net.SplitHostPort(vllm.Listener.Addr().String())
	f := newFake(t, "0.4.12")
	c, err := New(f.srv.URL, Options{ServerArgs: map[string]any{"port": port}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ models, want string }{
		// Another run's adapter beside the base model: that run is named.
		{`{"object":"list","data":[{"id":"Qwen/Qwen3-14B"},{"id":"other-run"}]}`, "other-run"},
		// This run's own (a resume): nobody else.
		{`{"object":"list","data":[{"id":"Qwen/Qwen3-14B"},{"id":"dp5-shaped"}]}`, ""},
		{`not json`, ""},
	} {
		models = tc.models
		if got, err := c.Occupant(context.Background(), testModel()); err != nil || got != tc.want {
			t.Errorf("Occupant() with %s = %q, %v; want %q", tc.models, got, err, tc.want)
		}
	}
	vllm.Close()
	if got, err := c.Occupant(context.Background(), testModel()); err != nil || got != "" {
		t.Errorf("Occupant() with nothing listening = %q, %v; want none", got, err)
	}
}
