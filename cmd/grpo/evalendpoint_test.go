package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/refmodel"
)

// recordingEndpoint is the reference backend's OpenAI-compatible server
// behind a recorder of what a client asked of it: adapter loads (name and
// path), unloads, and the model of every chat completion.
type recordingEndpoint struct {
	h http.Handler

	mu       sync.Mutex
	loads    []string // "name path"
	unloads  []string
	requests map[string]int // chat completions per model
}

func (r *recordingEndpoint) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	var b struct {
		Model    string `json:"model"`
		LoraName string `json:"lora_name"`
		LoraPath string `json:"lora_path"`
	}
	json.Unmarshal(body, &b)
	r.mu.Lock()
	switch req.URL.Path {
	case "/v1/load_lora_adapter":
		r.loads = append(r.loads, b.LoraName+" "+b.LoraPath)
	case "/v1/unload_lora_adapter":
		r.unloads = append(r.unloads, b.LoraName)
	case "/v1/chat/completions":
		r.requests[b.Model]++
	}
	r.mu.Unlock()
	r.h.ServeHTTP(w, req)
}

// reset forgets what was recorded so far.
func (r *recordingEndpoint) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loads, r.unloads, r.requests = nil, nil, map[string]int{}
}

// served is what GET /v1/models lists now.
func (r *recordingEndpoint) served(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids
}

// TestEvalRunEndpoints: 'grpo eval --db --run --step' of a run trained
// against endpoints (an OpenAI-compatible server and a trainer job API, the
// reference backend's, on loopback) loads each checkpoint's adapter by
// its name and stored path into the run's endpoint, samples each
// checkpoint from its own adapter (the base from the base model), answers
// RUN@STEP with run, step and selected_by, measures the same again, and
// leaves the endpoint serving what it served before.
func TestEvalRunEndpoints(t *testing.T) {
	dir := t.TempDir()
	peerDir := filepath.Join(dir, "peer")
	b, err := refmodel.New(refmodel.Options{DataDir: peerDir, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec := &recordingEndpoint{h: b.InferenceHandler(), requests: map[string]int{}}
	inf := httptest.NewServer(rec)
	defer inf.Close()
	tr := httptest.NewServer(b.TrainerHandler())
	defer tr.Close()

	// A run named as an experiment's runs are: adapters are named with '.'
	// for '/'. keep: 1 leaves only the last adapter loaded at the end.
	const name = "gap/held/1"
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: %s, steps: 3, seed: 2}
inference: {endpoints: [{url: %s/v1}], model: refmodel, adapters: {keep: 1}}
trainer: {kind: jobs, url: %s, base_model: refmodel, hyperparameters: {learning_rate: 1.0}}
validation: {episodes: 8}
test: {n: [5, 6], episodes: 4}
`, name, inf.URL, tr.URL)), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	code, out, _ := cli(t, "best", name, "--db", db, "--json")
	var best struct {
		Step     int `json:"step"`
		LastStep int `json:"last_step"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &best) != nil || best.LastStep != 3 {
		t.Fatalf("best: %d %s", code, out)
	}
	// The adapters by step, as the store names them (<run with '.' for
	// '/'>.<run id>-step-NNNN) and where the trainer wrote them.
	code, shown, _ := cli(t, "runs", "show", name, "--db", db, "--json")
	var view struct {
		Steps []struct {
			Step    int `json:"step"`
			Adapter *struct {
				Name string `json:"name"`
				Path string `json:"path"`
			} `json:"adapter"`
		} `json:"steps"`
	}
	if code != 0 || json.Unmarshal([]byte(shown), &view) != nil || len(view.Steps) != 4 {
		t.Fatalf("runs show --json: %d\n%.2000s", code, shown)
	}
	names, paths := map[int]string{}, map[int]string{}
	for _, s := range view.Steps[1:] {
		if s.Adapter == nil || !strings.HasPrefix(s.Adapter.Name, "gap.held.1.") || !strings.HasSuffix(s.Adapter.Name, fmt.Sprintf("-step-%04d", s.Step)) {
			t.Fatalf("step %d adapter %+v, want gap.held.1.<id>-step-%04d", s.Step, s.Adapter, s.Step)
		}
		names[s.Step], paths[s.Step] = s.Adapter.Name, s.Adapter.Path
		if filepath.Dir(s.Adapter.Path) != filepath.Join(peerDir, "adapters") {
			t.Fatalf("step %d adapter at %s, want under the trainer's %s", s.Step, s.Adapter.Path, filepath.Join(peerDir, "adapters"))
		}
	}
	adapter := func(step int) string { return names[step] }
	before := rec.served(t, inf.URL)
	if !slices.Equal(before, []string{adapter(3), "refmodel"}) {
		t.Fatalf("after the run the endpoint serves %v, want the last adapter and the base", before)
	}

	rec.reset()
	code, out, errs := cli(t, "eval", "--db", db, "--run", name, "--step", "base,best,last,1", "--json")
	if code != 0 {
		t.Fatalf("eval --run: exit %d\n%s", code, errs)
	}
	var got evalRunJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("eval --run --json: %v\n%s", err, out)
	}
	want := []struct {
		by   string
		step int
	}{{"base", 0}, {"best", best.Step}, {"last", 3}, {"step", 1}}
	if len(got.Results) != 2*len(want) {
		t.Fatalf("eval --run: %d results, want %d (4 checkpoints x n 5, 6):\n%s", len(got.Results), 2*len(want), out)
	}
	for i, r := range got.Results {
		w := want[i/2]
		if r.Run != name || r.Step == nil || *r.Step != w.step || r.SelectedBy != w.by ||
			r.Model != fmt.Sprintf("%s@%d", name, w.step) || r.N != []int{5, 6}[i%2] || r.Episodes != 4 {
			t.Fatalf("result %d = %+v, want run %s, step %d, selected_by %s, n %d, 4 episodes", i, r, name, w.step, w.by, []int{5, 6}[i%2])
		}
	}

	// Each adapter checkpoint was loaded by its name from the path the
	// trainer wrote it to; each checkpoint's episodes were sampled from
	// its own model and no other.
	steps := []int{best.Step, 3, 1}
	var wantLoads []string
	wantModels := []string{"refmodel"}
	for _, s := range steps {
		if s == 0 || slices.Contains(wantModels, adapter(s)) {
			continue
		}
		wantLoads = append(wantLoads, adapter(s)+" "+paths[s])
		wantModels = append(wantModels, adapter(s))
	}
	slices.Sort(wantLoads)
	slices.Sort(wantModels)
	loads := slices.Sorted(slices.Values(rec.loads))
	if !slices.Equal(loads, wantLoads) {
		t.Fatalf("eval loaded %q, want %q", loads, wantLoads)
	}
	var used []string
	for m, k := range rec.requests {
		used = append(used, m)
		// 4 tables at n=5 and n=6, 1 to 5 rounds: one call per
		// philosopher and round.
		if k < 4*(5+6) || k > 4*(5+6)*5 {
			t.Errorf("model %s: %d chat completions, want 44..220", m, k)
		}
	}
	slices.Sort(used)
	if !slices.Equal(used, wantModels) {
		t.Fatalf("eval sampled from %v, want %v", used, wantModels)
	}
	// It unloaded what it loaded, and only that: the run's last adapter,
	// served before, is served still.
	if after := rec.served(t, inf.URL); !slices.Equal(after, before) {
		t.Fatalf("after eval the endpoint serves %v, before it served %v", after, before)
	}
	if slices.Contains(rec.unloads, adapter(3)) {
		t.Fatalf("eval unloaded %s, which the endpoint served before it: unloads %v", adapter(3), rec.unloads)
	}

	// The adapters change the policy: some checkpoint plays the test
	// tables differently from the base.
	differs := false
	for _, r := range got.Results[2:] {
		if r.Reward.Mean != got.Results[r.N-5].Reward.Mean {
			differs = true
		}
	}
	if !differs {
		t.Errorf("every checkpoint scored as the base on every n; were the adapters used?\n%s", out)
	}

	// The same checkpoints measure the same again.
	code, again, _ := cli(t, "eval", "--db", db, "--run", name, "--step", "base,best,last,1", "--json")
	if code != 0 || again != out {
		t.Fatalf("a second eval --run differs:\n%s\n%s", out, again)
	}
	// --endpoint: the same checkpoints served by another server (the
	// run's endpoint restarted on another port): loaded there, not into
	// the run's endpoint, and measured the same.
	moved := &recordingEndpoint{h: b.InferenceHandler(), requests: map[string]int{}}
	inf2 := httptest.NewServer(moved)
	defer inf2.Close()
	rec.reset()
	code, elsewhere, errs := cli(t, "eval", "--db", db, "--run", name, "--step", "base,best,last,1", "--json", "--endpoint", inf2.URL+"/v1")
	if code != 0 || elsewhere != out {
		t.Fatalf("eval --run --endpoint: exit %d, differs from the run's endpoint:\n%s\n%s\n%s", code, out, elsewhere, errs)
	}
	if len(rec.loads) != 0 || len(rec.requests) != 0 {
		t.Fatalf("with --endpoint the run's endpoint still got loads %v and requests %v", rec.loads, rec.requests)
	}
	if got := slices.Sorted(slices.Values(moved.loads)); !slices.Equal(got, wantLoads) {
		t.Fatalf("--endpoint server loaded %q, want %q", got, wantLoads)
	}
	// And the store lists the measurements.
	code, shown, _ = cli(t, "runs", "show", name, "--db", db)
	if code != 0 || !strings.Contains(shown, "measured on the test split") {
		t.Fatalf("runs show after eval --run:\n%s", shown)
	}
}

// TestEvalRunEndpointDown: with the run's endpoint gone and no retry
// budget or outage window to wait in, eval --run fails, naming the
// endpoint and the cause (and not "waiting -1ns").
func TestEvalRunEndpointDown(t *testing.T) {
	dir := t.TempDir()
	b, err := refmodel.New(refmodel.Options{DataDir: filepath.Join(dir, "peer"), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inf := httptest.NewServer(b.InferenceHandler())
	tr := httptest.NewServer(b.TrainerHandler())
	defer tr.Close()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("run: {name: r, steps: 1}\ninference: {endpoints: [{url: %s/v1}], model: refmodel, retries: 0}\ntrainer: {kind: jobs, url: %s, base_model: refmodel}\nvalidation: {episodes: 2}\n", inf.URL, tr.URL)), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	inf.Close()
	code, _, errs := cli(t, "eval", "--db", db, "--run", "r", "--step", "last", "--retries", "0", "--retry-budget", "0s", "--outage-window", "0s")
	if code == 0 || !strings.Contains(errs, inf.URL) || !strings.Contains(errs, "connection refused") || strings.Contains(errs, "waiting -") {
		t.Fatalf("eval --run with its endpoint down: exit %d\n%s", code, errs)
	}
}

// TestEvalRunEndpointFlag: --endpoint is checked and applies to runs
// trained against endpoints only.
func TestEvalRunEndpointFlag(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: emb, steps: 1}\nvalidation: {episodes: 2}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", db, "--run", "emb", "--endpoint", "http://127.0.0.1:1/v1"}, "run emb used the embedded backend"},
		{[]string{"--db", db, "--run", "emb", "--endpoint", "127.0.0.1:8000"}, `--endpoint "127.0.0.1:8000": want an http:// or https:// URL`},
		{[]string{"--db", db, "--run", "emb", "--api-key-env", "K"}, "--api-key-env with --run names the key of --endpoint"},
		{[]string{"--endpoint", "http://127.0.0.1:1/v1"}, "--endpoint serves a stored run's checkpoints"},
	} {
		code, _, errs := cli(t, append([]string{"eval"}, tt.args...)...)
		if code == 0 || !strings.Contains(errs, tt.want) {
			t.Errorf("eval %v: exit %d, stderr %q; want an error containing %q", tt.args, code, errs, tt.want)
		}
	}
}

// TestEvalWarnsOfDrain: an endpoint that fails every completion is
// drained, and eval says so on standard error, naming the model (the
// fleet's warnings were dropped before).
func TestEvalWarnsOfDrain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
			return
		}
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	_, _, errs := cli(t, "eval", "--base-url", srv.URL+"/v1", "--model", "m", "--episodes", "1", "--n", "2", "--rounds", "1",
		"--retries", "0", "--retry-budget", "0s", "--outage-window", "0s")
	if !strings.Contains(errs, `msg="inference endpoint drained"`) || !strings.Contains(errs, "model=m") || !strings.Contains(errs, srv.URL) {
		t.Fatalf("stderr of eval against an endpoint answering 503:\n%s", errs)
	}
}
