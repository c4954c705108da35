package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/run"
)

// replica is a strict reference backend (vLLM-like, started with vLLM's
// tool flags) serving inference on a loopback port, recording the
// adapter loads it accepts and the models it is asked for.
type replica struct {
	srv      *httptest.Server
	down     atomic.Bool // answers 503 to everything, /health included
	fail     atomic.Bool // answers 500 to everything, /health included
	mu       sync.Mutex
	loads    []inference.LoadAdapterRequest // accepted (200) loads, in order
	chats    int
	requests int // requests served (not failed on purpose)
}

func startReplica(t *testing.T, seed int64) *replica {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Seed: seed, Strict: &refmodel.Strict{AutoToolChoice: true, Quirks: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r := &replica{}
	h := b.InferenceHandler()
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.down.Load() {
			http.Error(w, "engine restarting", http.StatusServiceUnavailable)
			return
		}
		if r.fail.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(`{"error":{"message":"CUDA error: an illegal memory access","type":"InternalServerError","param":null,"code":500}}`))
			return
		}
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		switch req.URL.Path {
		case "/v1/load_lora_adapter":
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(strings.NewReader(string(body)))
			rec := &statusRecorder{ResponseWriter: w}
			h.ServeHTTP(rec, req)
			if rec.code == 0 || rec.code == http.StatusOK {
				var lr inference.LoadAdapterRequest
				_ = json.Unmarshal(body, &lr)
				r.mu.Lock()
				r.loads = append(r.loads, lr)
				r.mu.Unlock()
			}
			return
		case "/v1/chat/completions":
			r.mu.Lock()
			r.chats++
			r.mu.Unlock()
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (r *replica) loaded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.loads {
		out = append(out, l.LoraName+" "+l.LoraPath)
	}
	return out
}

// startTrainer serves a reference backend's trainer job API alone.
func startTrainer(t *testing.T) string {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	srv := httptest.NewServer(b.TrainerHandler())
	t.Cleanup(srv.Close)
	return srv.URL
}

func fleetConfig(t *testing.T, name, naming, trainerURL string, endpoints ...string) config.Config {
	t.Helper()
	var eps []string
	for _, u := range endpoints {
		eps = append(eps, fmt.Sprintf("{url: %s/v1}", u))
	}
	return mustConfig(t, fmt.Sprintf(`run: {name: %s, steps: 3, seed: 3}
validation: {episodes: 4}
inference:
  model: refmodel
  retries: 1
  endpoints: [%s]
  adapters: {naming: %s}
trainer:
  kind: jobs
  url: %s
  base_model: refmodel
  hyperparameters: {learning_rate: %v}
`, name, strings.Join(eps, ", "), naming, trainerURL, refmodel.DefaultLearningRate))
}

// TestFleet_ReplicaKilledAfterFirstStep: two replicas, one killed once
// step 1 is committed. The run finishes every step on the survivor,
// which receives every later adapter; the run is named like an OpenAI
// reasoning model, which go-openai's own validation would have refused.
func TestFleet_ReplicaKilledAfterFirstStep(t *testing.T) {
	a, b := startReplica(t, 1), startReplica(t, 2)
	cfg := fleetConfig(t, "o3-fleet", "per-step", startTrainer(t), a.srv.URL, b.srv.URL)
	opts := options(t)
	reg := prometheus.NewRegistry()
	opts.FleetMetrics = inference.NewFleetMetrics(reg)
	var mu sync.Mutex
	var adapters []orchestrator.Adapter
	var down []orchestrator.Event
	opts.Events = func(e orchestrator.Event) {
		switch {
		case e.AdapterLoaded != nil:
			mu.Lock()
			adapters = append(adapters, e.AdapterLoaded.Adapter)
			mu.Unlock()
		case e.StepCommitted != nil && e.Step == 1:
			a.srv.CloseClientConnections()
			a.srv.Close()
		case e.EndpointState != nil:
			mu.Lock()
			down = append(down, e)
			mu.Unlock()
		}
	}
	r := MustOpen(t, cfg, opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	if got, want := state(t, opts.Store, "o3-fleet").State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
	last, _, err := opts.Store.LastStep(context.Background(), "o3-fleet")
	if err != nil || last != 3 {
		t.Fatalf("LastStep=%d %v, want 3", last, err)
	}
	if len(adapters) != 3 {
		t.Fatalf("adapter_loaded events=%v, want one per step", adapters)
	}
	var want []string
	for _, ad := range adapters {
		if !strings.HasPrefix(ad.Name, "o3-fleet") {
			t.Fatalf("adapter %s not named after the run", ad.Name)
		}
		want = append(want, ad.Name+" "+ad.Path)
	}
	if got := b.loaded(); !slices.Equal(got, want) {
		t.Fatalf("survivor loaded %v, want every step's adapter %v", got, want)
	}
	if got := a.loaded(); !slices.Equal(got, want[:1]) {
		t.Fatalf("killed replica loaded %v, want only step 1's %v", got, want[:1])
	}
	if v := gauge(t, reg, "grpo_inference_endpoint_up", a.srv.URL+"/v1"); v != 0 {
		t.Fatalf("up gauge of the killed replica=%v, want 0", v)
	}
	if v := gauge(t, reg, "grpo_inference_endpoint_drains_total", a.srv.URL+"/v1"); v < 1 {
		t.Fatalf("drains of the killed replica=%v, want at least 1", v)
	}
	// The drain is an endpoint_state event of the run, at a step after 1.
	mu.Lock()
	defer mu.Unlock()
	if len(down) == 0 {
		t.Fatal("no endpoint_state event for the killed replica")
	}
	for _, e := range down {
		s := e.EndpointState
		if e.Run != "o3-fleet" || e.Step < 1 || s.Endpoint != a.srv.URL+"/v1" || s.Up || s.Error == "" || s.ProbeIn <= 0 || s.ProbeEvery != inference.DefaultProbeInterval.Seconds() {
			t.Fatalf("endpoint_state event %+v %+v, want the killed replica down at a step >= 1 with its error, first probe and probe interval", e, *s)
		}
	}
}

// TestFleet_InplaceOnServerWithoutLoadInplace: the strict backend ignores
// load_inplace, as vLLM before the option did. At the end the run's one
// adapter name (its name and id, RUN.ID) serves the last step's adapter.
func TestFleet_InplaceOnServerWithoutLoadInplace(t *testing.T) {
	a := startReplica(t, 1)
	cfg := fleetConfig(t, "o4-inplace", "inplace", startTrainer(t), a.srv.URL)
	opts := options(t)
	r := MustOpen(t, cfg, opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	_, steps, _, err := opts.Store.Snapshot(context.Background(), "o4-inplace")
	if err != nil {
		t.Fatal(err)
	}
	lastStep := steps[len(steps)-1]
	if lastStep.Step != 3 || lastStep.Adapter == nil {
		t.Fatalf("last step %+v, want step 3 with an adapter", lastStep)
	}
	served := "o4-inplace." + state(t, opts.Store, "o4-inplace").ID
	m, ok, err := inference.NewAdminClient(a.srv.URL+"/v1", inference.AdminOptions{}).Adapter(context.Background(), served)
	if err != nil || !ok {
		t.Fatalf("Adapter(%s)=%v %v", served, ok, err)
	}
	if m.Root != lastStep.Adapter.Path {
		t.Fatalf("o4-inplace serves %s, want the last step's adapter %s", m.Root, lastStep.Adapter.Path)
	}
	if got := len(a.loaded()); got != 3 {
		t.Fatalf("accepted loads=%d, want 3 (one per step, by unload and load after the first)", got)
	}
}

// TestFleet_OutageOfEveryEndpoint: the only replica answers 503 to
// everything for a while after step 1 (issue 13's short outage). The run
// waits instead of failing. By default (retry_budget 2m) its requests are
// sent to the replica again with backoff: it is never drained. With
// retry_budget 0 it is drained at the first failure and, readmitted, gets
// step 2's adapter before serving again.
func TestFleet_OutageOfEveryEndpoint(t *testing.T) {
	for _, tt := range []struct {
		budget          time.Duration
		drains, readmit bool
	}{
		{budget: 0, drains: true, readmit: true},
		{budget: 2 * time.Minute},
	} {
		t.Run(fmt.Sprintf("retry_budget=%s", tt.budget), func(t *testing.T) {
			a := startReplica(t, 1)
			cfg := fleetConfig(t, "gpt-5-outage", "per-step", startTrainer(t), a.srv.URL)
			cfg.Inference.RetryBudget = config.Duration(tt.budget)
			opts := options(t)
			reg := prometheus.NewRegistry()
			opts.FleetMetrics = inference.NewFleetMetrics(reg)
			var outage sync.WaitGroup
			opts.Events = func(e orchestrator.Event) {
				if e.StepCommitted != nil && e.Step == 1 {
					a.down.Store(true)
					outage.Go(func() {
						time.Sleep(3 * time.Second)
						a.down.Store(false)
					})
				}
			}
			r := MustOpen(t, cfg, opts)
			if err := r.Play(context.Background()); err != nil {
				t.Fatalf("Play: %v", err)
			}
			outage.Wait()
			if got, want := state(t, opts.Store, "gpt-5-outage").State, checkpoint.StateSucceeded; got != want {
				t.Fatalf("state=%s, want %s", got, want)
			}
			if got := len(a.loaded()); got != 3 {
				t.Fatalf("accepted loads=%d (%v), want 3", got, a.loaded())
			}
			drains := gauge(t, reg, "grpo_inference_endpoint_drains_total", a.srv.URL+"/v1")
			readmissions := gauge(t, reg, "grpo_inference_endpoint_readmissions_total", a.srv.URL+"/v1")
			if (drains >= 1) != tt.drains || (readmissions >= 1) != tt.readmit {
				t.Fatalf("drains=%v readmissions=%v, want some: %v, %v", drains, readmissions, tt.drains, tt.readmit)
			}
			if v := gauge(t, reg, "grpo_inference_endpoint_up", a.srv.URL+"/v1"); v != 1 {
				t.Fatalf("up=%v at the end, want 1", v)
			}
		})
	}
}

// TestFleet_ReplicaAnswering500 (issue 13): of two replicas, one answers
// 500 to everything from the start. It is drained, never served, and the
// healthy one carries the run.
func TestFleet_ReplicaAnswering500(t *testing.T) {
	bad, good := startReplica(t, 1), startReplica(t, 2)
	bad.fail.Store(true)
	cfg := fleetConfig(t, "o1-half", "per-step", startTrainer(t), bad.srv.URL, good.srv.URL)
	opts := options(t)
	r := MustOpen(t, cfg, opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	if got, want := state(t, opts.Store, "o1-half").State, checkpoint.StateSucceeded; got != want {
		t.Fatalf("state=%s, want %s", got, want)
	}
	bad.mu.Lock()
	served := bad.requests
	bad.mu.Unlock()
	if served != 0 {
		t.Fatalf("the failing replica served %d requests, want 0", served)
	}
	good.mu.Lock()
	chats := good.chats
	good.mu.Unlock()
	if chats == 0 || len(good.loaded()) != 3 {
		t.Fatalf("healthy replica: %d chats, loads %v; want every request and adapter", chats, good.loaded())
	}
}

// gauge reads a fleet metric's value for the endpoint label.
func gauge(t *testing.T, reg *prometheus.Registry, name, endpoint string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "endpoint") == endpoint {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("no %s{endpoint=%q}", name, endpoint)
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestOpenChecksModel: a model the embedded backend does not serve is a
// config error before anything is recorded; one an external endpoint does
// not list is a warning (servers such as llama.cpp answer any name).
func TestOpenChecksModel(t *testing.T) {
	opts := options(t)
	_, err := run.Open(context.Background(), mustConfig(t, "run: {name: e, steps: 1}\ninference: {model: nosuch}\n"), opts)
	if want := `inference.model "nosuch": the embedded reference backend serves refmodel`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open on the embedded backend with model nosuch: %v, want %q", err, want)
	}
	if _, err := opts.Store.GetRun(context.Background(), "e"); !errors.Is(err, checkpoint.ErrRunNotFound) && !errors.Is(err, checkpoint.ErrNoDatabase) {
		t.Fatalf("a refused run was recorded: %v", err)
	}

	a := startReplica(t, 1)
	var logs bytes.Buffer
	opts = options(t)
	opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	cfg := fleetConfig(t, "x", "per-step", startTrainer(t), a.srv.URL)
	cfg.Inference.Model = "other"
	MustOpen(t, cfg, opts)
	if want := `msg="inference.model is not among the models the endpoints list; a server that checks names (vLLM) will refuse every request" run=x model=other listed=refmodel`; !strings.Contains(logs.String(), want) {
		t.Fatalf("logs %q, want %q", logs.String(), want)
	}
	logs.Reset()
	MustOpen(t, fleetConfig(t, "y", "per-step", startTrainer(t), a.srv.URL), opts)
	if strings.Contains(logs.String(), "inference.model") {
		t.Fatalf("a served model warned: %s", logs.String())
	}
}
