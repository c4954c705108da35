package art

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// fakeART is a hand-written stand-in for `art run` of one release, for fast
// unit tests of the client's own logic: it serves the release's captured
// /openapi.json, answers each endpoint with the shapes read in that
// release's art/cli.py and art/local/backend.py and records every request
// body. It validates nothing the way ART's pydantic models do, so passing
// here says nothing about compatibility: .ci/art.sh runs the real app.
type fakeART struct {
	t       testing.TB
	release string // "0.4.0", "0.4.12", "0.5.0"
	srv     *httptest.Server

	mu          sync.Mutex
	step        int
	checkpoints map[int]bool
	artBest     int // the step ART would call best by its benchmark
	requests    []recorded
	prepare     []string // the answer of /_prepare_backend_for_training
	// train, when set, writes the /_train_model answer instead of the
	// default (one line per gradient step, like ART's unsloth service).
	train func(w http.ResponseWriter, r *http.Request, f *fakeART)
	// failures makes the next n requests to a path answer 503.
	failures map[string]int
	// advantages holds what ART computed from the last /_train_model body.
	advantages [][]float64
}

type recorded struct {
	Method, Path, Query string
	Body                []byte
}

func newFake(t testing.TB, release string) *fakeART {
	t.Helper()
	doc, err := os.ReadFile("testdata/openapi-" + release + ".json")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeART{t: t, release: release, checkpoints: map[int]bool{0: true}, failures: map[string]int{},
		prepare: []string{"http://0.0.0.0:8000/v1", "default"}}
	var d openAPI
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, recorded{r.Method, r.URL.Path, r.URL.RawQuery, body})
		if n := f.failures[r.URL.Path]; n > 0 {
			f.failures[r.URL.Path] = n - 1
			f.mu.Unlock()
			http.Error(w, "Internal Server Error", http.StatusServiceUnavailable)
			return
		}
		f.mu.Unlock()
		if r.URL.Path == "/openapi.json" && r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			w.Write(doc)
			return
		}
		if _, ok := d.Paths[r.URL.Path][strings.ToLower(r.Method)]; !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"detail":"Not Found"}`)
			return
		}
		f.serve(w, r, body)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeART) client(t testing.TB) *Client {
	t.Helper()
	c, err := New(f.srv.URL, Options{Retry: &httpx.Policy{Retries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// bodies returns the recorded bodies of requests to path.
func (f *fakeART) bodies(path string) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.requests {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func jsonAnswer(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func unprocessable(w http.ResponseWriter, loc, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnprocessableEntity)
	fmt.Fprintf(w, `{"detail":[{"type":"missing","loc":["body",%q],"msg":%q,"input":null}]}`, loc, msg)
}

// needModel checks a TrainableModel the way pydantic would: an object with
// name, project and base_model strings.
func needModel(w http.ResponseWriter, m json.RawMessage, where string) bool {
	var v map[string]any
	if json.Unmarshal(m, &v) != nil || v == nil {
		unprocessable(w, where, "Input should be a valid dictionary")
		return false
	}
	for _, k := range []string{"name", "project", "base_model"} {
		if _, ok := v[k].(string); !ok {
			unprocessable(w, k, "Field required")
			return false
		}
	}
	return true
}

func (f *fakeART) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	var embedded map[string]json.RawMessage
	json.Unmarshal(body, &embedded)
	switch r.URL.Path {
	case "/healthcheck":
		jsonAnswer(w, map[string]string{"status": "ok"})
	case "/register":
		// /register takes the model itself as the body.
		if needModel(w, body, "body") {
			jsonAnswer(w, nil)
		}
	case "/_get_step":
		if needModel(w, body, "body") {
			f.mu.Lock()
			s := f.step
			f.mu.Unlock()
			jsonAnswer(w, s)
		}
	case "/_prepare_backend_for_training":
		if needModel(w, embedded["model"], "model") {
			jsonAnswer(w, f.prepare)
		}
	case "/_log":
		if needModel(w, embedded["model"], "model") {
			jsonAnswer(w, nil)
		}
	case "/_delete_checkpoints":
		// 0.4.0-0.5.7: keep the latest step and ART's best by benchmark.
		q := r.URL.Query()
		if q.Get("benchmark") == "" || q.Get("benchmark_smoothing") == "" {
			unprocessable(w, "benchmark", "Field required")
			return
		}
		if needModel(w, body, "body") {
			f.mu.Lock()
			f.keepOnly([]int{f.step, f.artBest})
			f.mu.Unlock()
			jsonAnswer(w, nil)
		}
	case "/_delete_checkpoint_files":
		var keep []int
		if err := json.Unmarshal(embedded["steps_to_keep"], &keep); err != nil {
			unprocessable(w, "steps_to_keep", "Field required")
			return
		}
		if needModel(w, embedded["model"], "model") {
			f.mu.Lock()
			f.keepOnly(keep)
			f.mu.Unlock()
			jsonAnswer(w, nil)
		}
	case "/_train_model":
		for _, k := range []string{"model", "trajectory_groups", "config", "dev_config"} {
			if embedded[k] == nil {
				unprocessable(w, k, "Field required")
				return
			}
		}
		if !needModel(w, embedded["model"], "model") {
			return
		}
		trainable := f.computeAdvantages(embedded)
		if f.train != nil {
			f.train(w, r, f)
			return
		}
		if !trainable {
			f.nothingTrainable(w)
			return
		}
		f.streamLines(w, []string{
			`{"loss": 0.5, "grad_norm": 1.5, "policy_loss": 0.5, "entropy": 0.25, "num_gradient_steps": 2}`,
			`{"loss": 0.25, "grad_norm": 0.5, "policy_loss": 0.25, "entropy": 0.75, "num_gradient_steps": 2}`,
		})
		f.advance()
	default:
		f.t.Errorf("fake ART: unexpected %s %s", r.Method, r.URL.Path)
	}
}

func (f *fakeART) keepOnly(keep []int) {
	for s := range f.checkpoints {
		if !slices.Contains(keep, s) {
			delete(f.checkpoints, s)
		}
	}
}

// advance saves a new checkpoint, as a finished training step does.
func (f *fakeART) advance() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.step++
	f.checkpoints[f.step] = true
}

func (f *fakeART) streamLines(w http.ResponseWriter, lines []string) {
	fl := w.(http.Flusher)
	for _, l := range lines {
		io.WriteString(w, l+"\n")
		fl.Flush()
	}
}

// nothingTrainable answers like each release when no group has a reward
// spread: 0.4.0 streams nothing and keeps its step; 0.4.12 and 0.5.0
// stream nothing and move the checkpoint to the next step.
func (f *fakeART) nothingTrainable(w http.ResponseWriter) {
	switch f.release {
	case "0.4.0":
		w.(http.Flusher).Flush()
	default:
		f.mu.Lock()
		delete(f.checkpoints, f.step)
		f.mu.Unlock()
		f.advance()
		w.(http.Flusher).Flush()
	}
}

// computeAdvantages does what ART's tokenize_trajectory_groups does with
// the rewards: per group, reward minus the group mean, divided by the
// population std plus 1e-6 unless dev_config.scale_rewards is false (and
// the release knows the key). It reports whether any group has a spread.
func (f *fakeART) computeAdvantages(body map[string]json.RawMessage) bool {
	var groups []struct {
		Trajectories []struct {
			Reward float64 `json:"reward"`
		} `json:"trajectories"`
	}
	json.Unmarshal(body["trajectory_groups"], &groups)
	var dev map[string]any
	json.Unmarshal(body["dev_config"], &dev)
	scale := true
	if v, ok := dev["scale_rewards"].(bool); ok && f.release != "0.4.0" {
		scale = v
	}
	trainable := false
	var all [][]float64
	for _, g := range groups {
		n := float64(len(g.Trajectories))
		var sum float64
		for _, t := range g.Trajectories {
			sum += t.Reward
		}
		mean := sum / n
		var ss float64
		for _, t := range g.Trajectories {
			ss += (t.Reward - mean) * (t.Reward - mean)
		}
		std := math.Sqrt(ss / n)
		var adv []float64
		for _, t := range g.Trajectories {
			a := t.Reward - mean
			if scale {
				a /= std + 1e-6
			}
			adv = append(adv, a)
			if t.Reward != g.Trajectories[0].Reward {
				trainable = true
			}
		}
		all = append(all, adv)
	}
	f.mu.Lock()
	f.advantages = all
	f.mu.Unlock()
	return trainable
}
