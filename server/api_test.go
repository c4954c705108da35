package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/server"
	"github.com/prometheus/client_golang/prometheus"
)

func TestRunLifecycle(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()

	r := launch(t, base, "", smallRun("life", 2))
	if got, want := r.Run, "life"; got != want {
		t.Fatalf("run=%q, want %q", got, want)
	}
	r = waitRun(t, base, "life", "finish", finished)
	if got, want := r.State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s (%s), want %s", got, r.Error, want)
	}
	if got, want := len(r.Steps), 3; got != want {
		t.Fatalf("len(steps)=%d, want %d", got, want)
	}
	for i, st := range r.Steps {
		if st.Step != i || st.Validation == nil {
			t.Fatalf("steps[%d]: step %d, validation %v; want step %d validated", i, st.Step, st.Validation, i)
		}
		// As grpo runs show --json: whether the adapter is on this disk.
		if (st.Adapter == nil) != (st.AdapterOnDisk == nil) || st.AdapterOnDisk != nil && !*st.AdapterOnDisk {
			t.Fatalf("steps[%d]: adapter %v, adapter_on_disk %v; want true with each adapter", i, st.Adapter, st.AdapterOnDisk)
		}
	}
	if r.Steps[2].Adapter == nil {
		t.Fatal("step 2 has no adapter: adapter_on_disk is not checked")
	}

	code, body := do(t, "GET", base+"/api/v1/runs/life/steps", "", "")
	var steps []struct {
		AdapterOnDisk *bool `json:"adapter_on_disk"`
	}
	if err := json.Unmarshal(body, &steps); code != http.StatusOK || err != nil || len(steps) != 3 || steps[2].AdapterOnDisk == nil || !*steps[2].AdapterOnDisk {
		t.Fatalf("GET steps = %d, %d steps, %v: %s", code, len(steps), err, body)
	}

	code, body = do(t, "GET", base+"/api/v1/runs/life/best", "", "")
	var best struct {
		Run string `json:"run"`
		checkpoint.Selection
	}
	if err := json.Unmarshal(body, &best); code != http.StatusOK || err != nil {
		t.Fatalf("GET best = %d %v: %s", code, err, body)
	}
	if best.Run != "life" || best.Policy != checkpoint.PolicyBestValidation || best.LastStep != 2 {
		t.Fatalf("best = %+v, want run life, best-validation, last step 2", best)
	}
	// The selected step has the highest validation reward (ties: earliest).
	top := 0
	for i, st := range r.Steps {
		if st.Validation.RewardMean > r.Steps[top].Validation.RewardMean {
			top = i
		}
	}
	if got, want := best.Step, top; got != want {
		t.Fatalf("best step=%d, want %d", got, want)
	}

	code, body = do(t, "GET", base+"/api/v1/runs", "", "")
	var list []struct {
		Name  string `json:"name"`
		State string `json:"state"`
		Steps int    `json:"steps"`
	}
	if err := json.Unmarshal(body, &list); code != http.StatusOK || err != nil || len(list) != 1 {
		t.Fatalf("GET runs = %d %v: %s", code, err, body)
	}
	if list[0].Name != "life" || list[0].State != checkpoint.StateSucceeded || list[0].Steps != 2 {
		t.Fatalf("runs[0] = %+v", list[0])
	}

	code, body = do(t, "GET", base+"/metrics", "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		`grpo_step{run="life"} 2`,
		`grpo_reward_mean{n="all",run="life",split="validation"}`,
		`grpo_reward_mean{n="5",run="life",split="validation"}`,
		`grpo_reward_mean{n="all",run="life",split="train"}`,
		`grpo_reward_std{n="5",run="life",split="validation"}`,
		`grpo_deadlock_rate{n="all",run="life",split="validation"}`,
		`grpo_trainer_loss{run="life"}`,
		`grpo_best_step{run="life"} ` + itoa(best.Step),
		`grpo_episodes_total{run="life",split="validation"} 12`, // 3 validations x 4
		`grpo_episodes_total{run="life",split="train"} 12`,      // 2 steps x 2 groups x 3
		`grpo_adapter_loads_total{run="life"}`,
		`grpo_trainer_job_duration_seconds_count{run="life"}`,
		`grpo_inflight_requests{run="life"} 0`,
	} {
		if !contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Every answer decoded to a tool call or an invalid output, counted
	// in its split. The run ended: its per-endpoint series (the fleet's,
	// and its requests by endpoint) are gone; TestRequestsByEndpoint
	// checks them while a run plays.
	for _, split := range []string{"train", "validation"} {
		tools := 0.0
		for _, tool := range rollout.ToolNames {
			tools += sample(t, body, `grpo_tool_calls_total{run="life",split="`+split+`",tool="`+tool+`"}`)
		}
		if tools == 0 {
			t.Errorf("no tool calls in split %s", split)
		}
	}
	for _, name := range []string{"grpo_inference_endpoint_up", "grpo_llm_requests_total", "grpo_llm_request_duration_seconds_count"} {
		if re := regexp.MustCompile(`(?m)^` + name + `\{[^}]*run="life"`); re.Match(body) {
			t.Errorf("/metrics keeps %s series of run life, which ended", name)
		}
	}
}

// sample is the value of series (name{labels}, as /metrics writes it) in
// a /metrics body.
func sample(t *testing.T, body []byte, series string) float64 {
	t.Helper()
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", series, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}

func TestCreateRejects(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	for _, tc := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"db", "run: {db: /etc/passwd}", 400, "run.db"},
		{"db json", `{"run": {"steps": 1, "db": "x.db"}}`, 400, "run.db"},
		{"db json with escapes", `{"run": {"steps": 1, "db": "a\/x.db"}}`, 400, "run.db"},
		{"unknown key", "env: {nn: 5}", 400, "env.nn"},
		{"bad value", "env: {mode: diagonal}", 400, "env.mode"},
		{"validate", "env: {n: 1}", 400, "env.n"},
		{"dot name", "run: {name: ..}", 400, "run.name"},
		{"slash name", `run: {name: "a//b"}`, 400, "run.name"},
		{"into another run's data", `run: {name: "a/jobs"}`, 400, `run.name: \"a/jobs\" is not accepted; use 1 to 64 of A-Z a-z 0-9 . _ - in segments joined by '/' (e.g. exp/arm/1), each starting with a letter or digit and none \"jobs\" or \"adapters\"`},
		{"not yaml", "run: [", 400, "line"},
		{"empty", "", 400, "empty config body: send the run's config as YAML or JSON ({} launches the default run)"},
		{"blank", " \n\t\n", 400, "empty config body"},
		// The maxima of keys that only a typo makes large (config.Bound),
		// in YAML and in JSON.
		{"request_timeout above its maximum", "inference: {request_timeout: 48h}", 400, "inference.request_timeout: is 48h0m0s; at most 24h (one attempt of one request"},
		{"retry_budget above its maximum", `{"inference": {"retry_budget": "25h"}}`, 400, "inference.retry_budget: is 25h0m0s; at most 24h (with an endpoint failing"},
		{"job_timeout above its maximum", `{"trainer": {"job_timeout": "200h"}}`, 400, "trainer.job_timeout: is 200h0m0s; at most 168h (7 days"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, "POST", base+"/api/v1/runs", "", tc.body)
			if code != tc.code || !contains(body, tc.want) {
				t.Fatalf("POST %q = %d %s, want %d naming %q", tc.body, code, body, tc.code, tc.want)
			}
		})
	}
	code, body := do(t, "GET", base+"/api/v1/runs", "", "")
	if code != 200 || strings.TrimSpace(string(body)) != "[]" {
		t.Fatalf("GET runs after rejects = %d %s, want 200 []", code, body)
	}
	for _, p := range []string{"/api/v1/runs/nope", "/api/v1/runs/nope/steps", "/api/v1/runs/nope/best"} {
		if code, body := do(t, "GET", base+p, "", ""); code != http.StatusNotFound {
			t.Errorf("GET %s = %d %s, want 404", p, code, body)
		}
	}
	if code, _ := do(t, "POST", base+"/api/v1/runs/nope/cancel", "", ""); code != http.StatusNotFound {
		t.Errorf("cancel unknown = %d, want 404", code)
	}
}

func TestGeneratedNamesAndCancel(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()

	// Two unnamed runs at once get distinct names.
	a := launch(t, base, "", "run: {steps: 50}\nvalidation: {episodes: 4}")
	b := launch(t, base, "", "run: {steps: 50}\nvalidation: {episodes: 4}")
	if a.Run != "dp5-shaped-1" || b.Run != "dp5-shaped-2" {
		t.Fatalf("names %q, %q; want dp5-shaped-1, dp5-shaped-2", a.Run, b.Run)
	}
	// {} is the default run (an empty body is refused: TestCreateRejects).
	if c := launch(t, base, "", "{}"); c.Run != "dp5-shaped-3" {
		t.Fatalf("the default run is named %q, want dp5-shaped-3", c.Run)
	} else if code, body := do(t, "POST", base+"/api/v1/runs/"+c.Run+"/cancel", "", ""); code != http.StatusOK {
		t.Fatalf("cancel %s = %d %s", c.Run, code, body)
	}
	if code, body := do(t, "POST", base+"/api/v1/runs", "", smallRun(a.Run, 1)); code != http.StatusConflict {
		t.Fatalf("POST duplicate = %d %s, want 409", code, body)
	}

	waitRun(t, base, a.Run, "step 1", func(r runJSON) bool { return len(r.Steps) >= 2 })
	for _, name := range []string{a.Run, b.Run} {
		code, body := do(t, "POST", base+"/api/v1/runs/"+name+"/cancel", "", "")
		if code != http.StatusOK {
			t.Fatalf("cancel %s = %d %s", name, code, body)
		}
		r := getRun(t, base, name)
		if r.State != checkpoint.StateCancelled || r.Hosted {
			t.Fatalf("after cancel: state %s hosted %v, want cancelled, not hosted", r.State, r.Hosted)
		}
		if len(r.Steps) > 50 {
			t.Fatalf("%d steps", len(r.Steps))
		}
	}
	code, body := do(t, "POST", base+"/api/v1/runs/"+a.Run+"/cancel", "", "")
	if code != http.StatusConflict || !contains(body, "cancelled") {
		t.Fatalf("second cancel = %d %s, want 409 naming the state", code, body)
	}

	// A run cancelled through the API is not resumed by the next daemon.
	s.Close()
	s2 := e.MustStart(t, server.Options{})
	if r := getRun(t, s2.URL(), a.Run); r.State != checkpoint.StateCancelled || r.Hosted {
		t.Fatalf("after restart: state %s hosted %v, want cancelled, not hosted", r.State, r.Hosted)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{Token: "s3cret"})
	base := s.URL()
	for _, tok := range []string{"", "wrong"} {
		code, body := do(t, "POST", base+"/api/v1/runs", tok, "run: {db: x}")
		if code != http.StatusUnauthorized {
			t.Fatalf("POST with token %q = %d %s, want 401", tok, code, body)
		}
		if code, _ := do(t, "POST", base+"/api/v1/runs/x/cancel", tok, ""); code != http.StatusUnauthorized {
			t.Fatalf("cancel with token %q = %d, want 401", tok, code)
		}
	}
	// The right token gets through to validation.
	if code, body := do(t, "POST", base+"/api/v1/runs", "s3cret", "run: {db: x}"); code != http.StatusBadRequest {
		t.Fatalf("POST with token = %d %s, want 400", code, body)
	}
	// The scheme's name is case-insensitive; the token is not.
	for auth, want := range map[string]int{"bearer s3cret": http.StatusBadRequest, "BEARER s3cret": http.StatusBadRequest,
		"Bearer S3CRET": http.StatusUnauthorized, "Basic s3cret": http.StatusUnauthorized, "Bearers3cret": http.StatusUnauthorized} {
		req, _ := http.NewRequest("POST", base+"/api/v1/runs", strings.NewReader("run: {db: x}"))
		req.Header.Set("Content-Type", "application/yaml")
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST with Authorization %q = %d, want %d", auth, resp.StatusCode, want)
		}
	}
	// Reads need no token.
	if code, _ := do(t, "GET", base+"/api/v1/runs", "", ""); code != http.StatusOK {
		t.Fatalf("GET runs = %d, want 200", code)
	}

	// Beyond loopback a token is mandatory; the daemon refuses before
	// listening.
	s2 := server.New(server.Options{Store: e.store, DataDir: e.dir, Addr: "0.0.0.0:0"})
	if err := s2.Start(context.Background()); !errors.Is(err, server.ErrNoToken) {
		t.Fatalf("Start on 0.0.0.0 without token: %v, want ErrNoToken", err)
	}
	s2.Close()
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:80": true, "[::1]:9": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false, "[::]:80": false, "example.com:80": false,
	} {
		if got := server.Loopback(addr); got != want {
			t.Errorf("Loopback(%q)=%v, want %v", addr, got, want)
		}
	}
}

func TestRestartResumes(t *testing.T) {
	e := newEnv(t)
	s1 := e.MustStart(t, server.Options{})
	launch(t, s1.URL(), "", smallRun("phoenix", 4))
	waitRun(t, s1.URL(), "phoenix", "step 1", func(r runJSON) bool { return len(r.Steps) >= 2 })
	s1.Close()
	run, err := e.store.GetRun(context.Background(), "phoenix")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := run.State, checkpoint.StateRunning; got != want {
		t.Fatalf("state after shutdown=%s, want %s (resumable)", got, want)
	}
	_, before, _, _ := e.store.Snapshot(context.Background(), "phoenix")
	if len(before) >= 5 {
		t.Fatalf("run finished before the shutdown (%d steps): test proves nothing", len(before))
	}

	s2 := e.MustStart(t, server.Options{})
	r := waitRun(t, s2.URL(), "phoenix", "finish", finished)
	if got, want := r.State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s (%s), want %s", got, r.Error, want)
	}
	_, steps, evals, err := e.store.Snapshot(context.Background(), "phoenix")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 5 || len(evals) != 5 {
		t.Fatalf("%d steps, %d evaluations; want 5 of each", len(steps), len(evals))
	}
	for i := range steps {
		if steps[i].Step != i || evals[i].Step != i {
			t.Fatalf("step %d: stored step %d, evaluation %d", i, steps[i].Step, evals[i].Step)
		}
	}
}

// TestResumeWhenLeaseFrees: a run another process holds when the daemon
// starts is resumed by the daemon once that process lets go of it, and
// left alone while it holds it.
func TestResumeWhenLeaseFrees(t *testing.T) {
	e := newEnv(t)
	s1 := e.MustStart(t, server.Options{})
	// Both launched before either is waited for, and long enough that
	// neither ends while the other reaches step 1 on a loaded machine.
	const steps = 8
	for _, name := range []string{"ended", "held"} {
		launch(t, s1.URL(), "", smallRun(name, steps))
	}
	for _, name := range []string{"ended", "held"} {
		waitRun(t, s1.URL(), name, "step 1", func(r runJSON) bool { return len(r.Steps) >= 2 })
	}
	s1.Close()

	// Another process (played here by this one) holds both runs.
	ctx := context.Background()
	lease, err := e.store.AcquireLease(ctx, "held", checkpoint.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			lease.Release(ctx)
		}
	}()
	other, err := e.store.AcquireLease(ctx, "ended", checkpoint.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	s2 := e.MustStart(t, server.Options{ResumeRetry: 20 * time.Millisecond})
	time.Sleep(200 * time.Millisecond) // ten retries
	for _, name := range []string{"held", "ended"} {
		if r := getRun(t, s2.URL(), name); r.Hosted || r.State != checkpoint.StateRunning {
			t.Fatalf("run %s while another process holds it: hosted %v, state %s; want not hosted, running", name, r.Hosted, r.State)
		}
	}
	// The other process ends one of them: the daemon leaves it ended.
	if err := e.store.SetRunState(ctx, "ended", checkpoint.StateCancelled, "cancelled there"); err != nil {
		t.Fatal(err)
	}
	other.Release(ctx)
	if _, stored, _, _ := e.store.Snapshot(ctx, "held"); len(stored) > steps {
		t.Fatalf("run finished before the daemon could resume it: the test proves nothing")
	}
	lease.Release(ctx)
	released = true
	r := waitRun(t, s2.URL(), "held", "finish", finished)
	if r.State != checkpoint.StateSucceeded {
		t.Fatalf("state=%s (%s), want %s", r.State, r.Error, checkpoint.StateSucceeded)
	}
	if _, stored, _, _ := e.store.Snapshot(ctx, "held"); len(stored) != steps+1 {
		t.Fatalf("%d steps stored, want %d", len(stored), steps+1)
	}
	if r := getRun(t, s2.URL(), "ended"); r.Hosted || r.State != checkpoint.StateCancelled || len(r.Steps) > steps {
		t.Fatalf("run ended by the other process: hosted %v, state %s, %d steps; want not hosted, cancelled, fewer than %d", r.Hosted, r.State, len(r.Steps), steps+1)
	}
}

// TestAPIFallback: a request under /api/ that no endpoint takes gets a
// JSON answer: 405 with Allow for a known path and another method, 404
// otherwise; the dashboard still answers outside /api/.
func TestAPIFallback(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	for _, tt := range []struct {
		method, path string
		code         int
		allow, msg   string
	}{
		{"GET", "/api/v1/runs/x/cancel", http.StatusMethodNotAllowed, "POST", "GET /api/v1/runs/x/cancel: method not allowed; use POST"},
		{"GET", "/api/v1/runs/x/promote", http.StatusMethodNotAllowed, "POST", "use POST"},
		{"DELETE", "/api/v1/runs", http.StatusMethodNotAllowed, "GET, POST", "use GET or POST"},
		{"POST", "/api/v1/runs/x/steps", http.StatusMethodNotAllowed, "GET", "use GET"},
		{"GET", "/api/v1/nothing", http.StatusNotFound, "", "no API endpoint /api/v1/nothing"},
		{"POST", "/api/v1/runs/x/bogus", http.StatusNotFound, "", "no API endpoint /api/v1/runs/x/bogus"},
	} {
		req, _ := http.NewRequest(tt.method, s.URL()+tt.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error string }
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tt.code || derr != nil || !strings.Contains(body.Error, tt.msg) || resp.Header.Get("Allow") != tt.allow {
			t.Errorf("%s %s = %d Allow %q %q (%v), want %d Allow %q and an error containing %q",
				tt.method, tt.path, resp.StatusCode, resp.Header.Get("Allow"), body.Error, derr, tt.code, tt.allow, tt.msg)
		}
	}
	if code, body := do(t, "GET", s.URL()+"/", "", ""); code != http.StatusOK || !strings.Contains(string(body), "<html") {
		t.Fatalf("GET / = %d, want the dashboard", code)
	}
	if code, _ := do(t, "GET", s.URL()+"/api/v1/runs", "", ""); code != http.StatusOK {
		t.Fatalf("GET /api/v1/runs = %d", code)
	}
}

// TestStartRefusesUnusableDirectories: a data directory that cannot be
// created fails the daemon's start, naming it, before it listens (it
// used to start and fail every POST).
func TestStartRefusesUnusableDirectories(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := server.New(server.Options{Store: checkpoint.New(filepath.Join(dir, "grpo.db"), checkpoint.Options{}),
		DataDir: filepath.Join(file, "data"), Addr: "127.0.0.1:0", Registry: prometheus.NewRegistry()})
	defer s.Close()
	if err := s.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "data directory") || !strings.Contains(err.Error(), file) {
		t.Fatalf("Start with a data directory under a file: %v", err)
	}
}
