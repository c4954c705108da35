package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/run"
)

// fakeART is a hand-written stand-in for ART's backend server (`art run`)
// of one release, as the trainer/art package documents it, that records
// what it receives. It validates nothing as ART's pydantic models do, so it
// tests grpo's side only; .ci/art.sh runs the real app of each release. Its
// /_prepare_backend_for_training answers ART's own 0.0.0.0 address, at
// which it also serves ART's vLLM: chat completions are answered by an
// in-process reference backend, after checking that the model asked for
// is the one ART serves at its current step.
type fakeART struct {
	t       *testing.T
	release string
	doc     []byte
	paths   map[string]map[string]json.RawMessage
	srv     *httptest.Server
	vllm    http.Handler

	mu        sync.Mutex
	name      string // registered model
	step      int
	requests  map[string]int // path -> count
	trains    [][]byte       // bodies of /_train_model that trained
	logs      [][]byte       // bodies of /_log
	keeps     [][]int        // steps_to_keep of /_delete_checkpoint_files
	chats     []chatSeen
	logprobs  map[string]bool // compact logprobs JSON of every choice served
	failTrain map[int]bool    // /_train_model requests (1-based) answered 500 before training
	failStep  map[int]bool    // /_get_step requests (1-based) answered 400
	// script, when set, answers chat completions instead of the reference
	// backend: it maps a request's sampling seed to the episode (index in
	// its group) and round, and replies with the tool (or text) it names.
	script func(seed int64, s rollout.State) string
	// afterTrain, when set, runs after the n-th training step (1-based)
	// has streamed its lines and moved ART's step.
	afterTrain func(n int)
}

type chatSeen struct {
	Model string
	Step  int // ART's step when the request arrived
}

func newFakeART(t *testing.T, release string) *fakeART {
	t.Helper()
	doc, err := os.ReadFile("../trainer/art/testdata/openapi-" + release + ".json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	f := &fakeART{t: t, release: release, doc: doc, paths: d.Paths, vllm: b.InferenceHandler(),
		requests: map[string]int{}, logprobs: map[string]bool{}, failTrain: map[int]bool{}, failStep: map[int]bool{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// servedName is the model ART's vLLM serves: one adapter named after the
// model, replaced in place after each step.
func (f *fakeART) servedName(step int) string {
	return f.name
}

// trained returns the bodies of the training calls that trained, and
// ART's step.
func (f *fakeART) trained() ([][]byte, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.trains), f.step
}

func (f *fakeART) count(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[path]
}

func (f *fakeART) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests[r.URL.Path]++
	n := f.requests[r.URL.Path]
	f.mu.Unlock()
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		f.serveVLLM(w, r, body)
		return
	}
	if r.URL.Path == "/openapi.json" {
		w.Write(f.doc)
		return
	}
	if _, ok := f.paths[r.URL.Path][strings.ToLower(r.Method)]; !ok {
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"detail":"Not Found"}`)
		return
	}
	var embedded map[string]json.RawMessage
	json.Unmarshal(body, &embedded)
	answer := func(v any) { json.NewEncoder(w).Encode(v) }
	switch r.URL.Path {
	case "/healthcheck":
		answer(map[string]string{"status": "ok"})
	case "/register":
		var m struct {
			Name     string `json:"name"`
			Project  string `json:"project"`
			Internal struct {
				Peft struct {
					R     int `json:"r"`
					Alpha int `json:"lora_alpha"`
				} `json:"peft_args"`
			} `json:"_internal_config"`
		}
		json.Unmarshal(body, &m)
		if m.Name == "" || m.Project != "grpo" || m.Internal.Peft.R != 8 || m.Internal.Peft.Alpha != 16 {
			f.t.Errorf("fake ART: /register body %s: want the model itself, project grpo, peft_args r 8 lora_alpha 16", body)
		}
		f.mu.Lock()
		f.name = m.Name
		f.mu.Unlock()
		answer(nil)
	case "/_get_step":
		f.mu.Lock()
		s, fail := f.step, f.failStep[n]
		f.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"detail":"model not registered"}`)
			return
		}
		answer(s)
	case "/_prepare_backend_for_training":
		u, _ := url.Parse(f.srv.URL)
		answer([]string{"http://0.0.0.0:" + u.Port() + "/v1", "art-key"})
	case "/_log":
		f.mu.Lock()
		f.logs = append(f.logs, body)
		f.mu.Unlock()
		answer(nil)
	case "/_delete_checkpoint_files":
		var keep []int
		json.Unmarshal(embedded["steps_to_keep"], &keep)
		f.mu.Lock()
		f.keeps = append(f.keeps, keep)
		f.mu.Unlock()
		answer(nil)
	case "/_delete_checkpoints":
		answer(nil)
	case "/_train_model":
		f.mu.Lock()
		fail := f.failTrain[n]
		f.mu.Unlock()
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"detail":"CUDA out of memory"}`)
			return
		}
		fl := w.(http.Flusher)
		for _, l := range []string{
			`{"loss": 0.5, "grad_norm": 1.5, "policy_loss": 0.5, "entropy": 0.25, "num_gradient_steps": 2}`,
			`{"loss": 0.25, "grad_norm": 0.5, "policy_loss": 0.25, "entropy": 0.75, "num_gradient_steps": 2}`,
		} {
			io.WriteString(w, l+"\n")
			fl.Flush()
		}
		f.mu.Lock()
		f.step++
		f.trains = append(f.trains, body)
		trained, after := len(f.trains), f.afterTrain
		f.mu.Unlock()
		if after != nil {
			after(trained)
		}
	default:
		f.t.Errorf("fake ART: unexpected %s %s", r.Method, r.URL.Path)
	}
}

// serveVLLM is ART's vLLM: it checks the key and the model name, and
// records the logprobs of every choice it serves.
func (f *fakeART) serveVLLM(w http.ResponseWriter, r *http.Request, body []byte) {
	if got := r.Header.Get("Authorization"); got != "Bearer art-key" {
		f.t.Errorf("fake ART vLLM: %s with Authorization %q, want the key ART answered", r.URL.Path, got)
	}
	switch r.URL.Path {
	case "/v1/models":
		f.vllm.ServeHTTP(w, r)
		return
	case "/v1/chat/completions":
	default:
		// load_lora_adapter and the like: ART loads its checkpoints itself.
		f.t.Errorf("fake ART vLLM: unexpected %s %s", r.Method, r.URL.Path)
		http.Error(w, "not expected", http.StatusBadRequest)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	model, _ := req["model"].(string)
	f.chats = append(f.chats, chatSeen{Model: model, Step: f.step})
	want := f.servedName(f.step)
	f.mu.Unlock()
	if model != want {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error":{"message":"The model %s does not exist.","type":"NotFoundError","code":404}}`, model)
		return
	}
	if f.script != nil {
		var st rollout.State
		msgs, _ := req["messages"].([]any)
		for i := len(msgs) - 1; i >= 0; i-- {
			m, _ := msgs[i].(map[string]any)
			if content, ok := m["content"].(string); ok && m["role"] == "user" {
				st, _ = rollout.ParseState(content)
				break
			}
		}
		seed, _ := req["seed"].(float64)
		f.scripted(w, f.script(int64(seed), st))
		return
	}
	req["model"] = refmodel.BaseModelName
	fwd, _ := json.Marshal(req)
	rr := httptest.NewRecorder()
	r2 := r.Clone(r.Context())
	r2.Body = io.NopCloser(bytes.NewReader(fwd))
	r2.ContentLength = int64(len(fwd))
	f.vllm.ServeHTTP(rr, r2)
	var resp struct {
		Choices []struct {
			Logprobs json.RawMessage `json:"logprobs"`
		} `json:"choices"`
	}
	if json.Unmarshal(rr.Body.Bytes(), &resp) == nil {
		f.mu.Lock()
		for _, c := range resp.Choices {
			f.logprobs[compact(c.Logprobs)] = true
		}
		f.mu.Unlock()
	}
	for k, v := range rr.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rr.Code)
	w.Write(rr.Body.Bytes())
}

// scripted answers one chat completion with reply: a tool call when it
// names a tool, else plain text; with logprobs as ART's vLLM returns them.
func (f *fakeART) scripted(w http.ResponseWriter, reply string) {
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "tool_calls"
	if rollout.ToolIndex(reply) >= 0 {
		msg["tool_calls"] = []map[string]any{{"id": "call-1", "type": "function", "function": map[string]string{"name": reply, "arguments": "{}"}}}
	} else {
		msg["content"], finish = reply, "stop"
	}
	lp := json.RawMessage(`{"content":[{"token":"token_id:7","logprob":-0.5,"bytes":[]}]}`)
	f.mu.Lock()
	f.logprobs[compact(lp)] = true
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
		"choices": []map[string]any{{"index": 0, "message": msg, "finish_reason": finish, "logprobs": lp}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
	})
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// artConfig is a small run against the fake ART server.
func artConfig(t *testing.T, f *fakeART, name string, steps int) config.Config {
	t.Helper()
	yaml := fmt.Sprintf(`run: {name: %s, steps: %d, seed: 3}
env: {n: 3, rounds: 3}
grpo: {groups: 2, episodes_per_group: 3, resample_zero_variance: true}
validation: {episodes: 2, n: [3]}
inference: {concurrency: 8}
trainer: {kind: art, url: '%s', base_model: Qwen/Qwen3-0.6B, lora: {rank: 8, alpha: 16}}
`, name, steps, f.srv.URL)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// artTrainBody is the part of a /_train_model body the tests read.
type artTrainBody struct {
	Model            struct{ Name string } `json:"model"`
	TrajectoryGroups []struct {
		Trajectories []struct {
			MessagesAndChoices []json.RawMessage  `json:"messages_and_choices"`
			Reward             float64            `json:"reward"`
			Metrics            map[string]float64 `json:"metrics"`
			Metadata           map[string]any     `json:"metadata"`
		} `json:"trajectories"`
	} `json:"trajectory_groups"`
	DevConfig map[string]any `json:"dev_config"`
}

func TestARTRunTrains(t *testing.T) {
	for _, release := range []string{"0.4.0", "0.4.12"} {
		t.Run(release, func(t *testing.T) {
			f := newFakeART(t, release)
			opts := options(t)
			var mu sync.Mutex
			var best []int
			opts.Events = func(e orchestrator.Event) {
				if e.BestChanged != nil {
					mu.Lock()
					best = append(best, e.BestChanged.Step)
					mu.Unlock()
				}
			}
			cfg := artConfig(t, f, "o3-art", 3)
			r := MustOpen(t, cfg, opts)
			if got, want := r.Config().Inference.Model, f.servedName(0); got != want {
				t.Errorf("inference.model = %q, want %q, the name ART serves step 0 under", got, want)
			}
			if err := r.Play(context.Background()); err != nil {
				t.Fatalf("Play: %v", err)
			}
			if got := state(t, opts.Store, "o3-art").State; got != checkpoint.StateSucceeded {
				t.Fatalf("state %s, want succeeded", got)
			}
			_, steps, _, err := opts.Store.Snapshot(context.Background(), "o3-art")
			if err != nil {
				t.Fatal(err)
			}
			// The run trains every step, once.
			trains, artStep := f.trained()
			if len(trains) != 3 || artStep != 3 || len(steps) != 4 {
				t.Fatalf("%d training calls, ART step %d, %d steps committed; want 3, 3, 4", len(trains), artStep, len(steps))
			}
			for _, s := range steps[1:] {
				want := f.servedName(s.Step)
				if s.Job == nil || s.Adapter == nil || s.Adapter.Name != want || s.Adapter.Path != fmt.Sprintf("grpo/models/o3-art/checkpoints/%04d", s.Step) {
					t.Errorf("step %d: job %+v adapter %+v, want a job and adapter %s", s.Step, s.Job, s.Adapter, want)
				}
				if s.Job != nil && (s.Job.Metrics["loss"] != 0.375 || s.Job.Metrics["grad_norm"] != 1) {
					t.Errorf("step %d: job metrics %v, want loss 0.375 and grad_norm 1 (means of the two streamed lines)", s.Step, s.Job.Metrics)
				}
			}
			for i, body := range trains {
				checkTrainBody(t, f, body, steps[i+1], cfg.GRPO.Advantage)
			}
			// Sampling uses the name ART serves at its current step.
			seen := map[int]bool{}
			f.mu.Lock()
			chats, logs := f.chats, f.logs
			f.mu.Unlock()
			for _, c := range chats {
				seen[c.Step] = true
				if want := f.servedName(c.Step); c.Model != want {
					t.Fatalf("chat request for %q at ART step %d, want %q", c.Model, c.Step, want)
				}
			}
			if len(seen) != 4 {
				t.Errorf("chat requests at ART steps %v, want 0 to 3", seen)
			}
			{
				// Validation is logged with /_log, split val, at steps 0 to 3.
				if len(logs) != 4 {
					t.Fatalf("%d /_log calls, want 4 (one per validation)", len(logs))
				}
				for _, b := range logs {
					var l struct {
						Split  string `json:"split"`
						Groups []struct {
							Trajectories []struct {
								Metadata map[string]any `json:"metadata"`
							} `json:"trajectories"`
						} `json:"trajectory_groups"`
					}
					if err := json.Unmarshal(b, &l); err != nil {
						t.Fatal(err)
					}
					if l.Split != "val" || len(l.Groups) != 1 || len(l.Groups[0].Trajectories) != 2*3 {
						t.Errorf("/_log split %q, %d groups: want val, one group of 2 episodes x 3 philosophers: %.300s", l.Split, len(l.Groups), b)
					}
				}
				if n := f.count("/_delete_checkpoint_files"); n != 0 {
					t.Errorf("%d /_delete_checkpoint_files on a server without it", n)
				}
			}
		})
	}
}

// checkTrainBody checks one /_train_model body against the step the store
// committed: one ART group per grpo group with signal, every scored
// trajectory of it (zero advantages included) with grpo's advantage as its
// reward, and every sampled choice with the logprobs the server returned.
func checkTrainBody(t *testing.T, f *fakeART, body []byte, step checkpoint.Step, opt grpo.AdvantageOptions) {
	t.Helper()
	var b artTrainBody
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	name := f.name
	f.mu.Unlock()
	if b.Model.Name != name {
		t.Errorf("step %d: model %q", step.Step, b.Model.Name)
	}
	if f.release != "0.4.0" && b.DevConfig["scale_rewards"] != false {
		t.Errorf("step %d: dev_config %v, want scale_rewards false", step.Step, b.DevConfig)
	}
	var signal []checkpoint.GroupStats
	for _, g := range step.Train.Groups {
		if !g.ZeroVariance {
			signal = append(signal, g)
		}
	}
	if len(b.TrajectoryGroups) != len(signal) || len(signal) == 0 {
		t.Fatalf("step %d: %d ART groups, want %d (the groups with signal, at least one)", step.Step, len(b.TrajectoryGroups), len(signal))
	}
	for gi, g := range b.TrajectoryGroups {
		want := signal[gi]
		adv := grpo.Advantages(want.Rewards, opt)
		// ART 0.4.4 on (scale_rewards) skips exact zeros: they are not sent.
		sent := 0
		for _, a := range adv {
			if f.release == "0.4.0" || math.Abs(a) > 1e-12 {
				sent++
			}
		}
		for _, tr := range g.Trajectories {
			if tr.Metadata["grpo_group"] != want.ID {
				t.Fatalf("step %d group %d: trajectory of group %v, want %s", step.Step, gi, tr.Metadata["grpo_group"], want.ID)
			}
			ep, _ := tr.Metadata["grpo_episode"].(string)
			k := slices.Index(want.Rewards, tr.Metrics["grpo_reward"])
			if k < 0 {
				t.Fatalf("step %d group %s episode %s: grpo_reward %v is none of the scored rewards %v", step.Step, want.ID, ep, tr.Metrics["grpo_reward"], want.Rewards)
			}
			// Sent: grpo's advantage, centred to sum exactly 0 (rounding-sized moves).
			if math.Abs(tr.Reward-adv[k]) > 1e-12 || (f.release != "0.4.0" && tr.Reward == 0) {
				t.Errorf("step %d group %s episode %s: reward %v (grpo_reward %v), want advantage %v (reward %v)", step.Step, want.ID, ep, tr.Reward, tr.Metrics["grpo_reward"], adv[k], want.Rewards[k])
			}
			for i, item := range tr.MessagesAndChoices {
				checkChoice(t, f, item, fmt.Sprintf("step %d episode %s item %d", step.Step, ep, i))
			}
		}
		if len(g.Trajectories) != sent*step.N {
			t.Errorf("step %d group %s: %d trajectories; want every scored episode with an advantage ART trains on (%d) x %d philosophers", step.Step, want.ID, len(g.Trajectories), sent, step.N)
		}
	}
}

// checkChoice checks that a sampled choice (an item without a role)
// carries the logprobs the inference server returned for it, in vLLM's
// token_id:<n> form.
func checkChoice(t *testing.T, f *fakeART, item json.RawMessage, where string) {
	t.Helper()
	var it struct {
		Role     *string         `json:"role"`
		Logprobs json.RawMessage `json:"logprobs"`
	}
	if err := json.Unmarshal(item, &it); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if it.Role != nil {
		return
	}
	var lp struct {
		Content []struct {
			Token string `json:"token"`
		} `json:"content"`
	}
	if json.Unmarshal(it.Logprobs, &lp) != nil || len(lp.Content) == 0 {
		t.Fatalf("%s: sampled choice without logprobs: %.300s", where, item)
	}
	for _, c := range lp.Content {
		if !strings.HasPrefix(c.Token, "token_id:") {
			t.Fatalf("%s: token %q not in token_id:<n> form", where, c.Token)
		}
	}
	f.mu.Lock()
	served := f.logprobs[compact(it.Logprobs)]
	f.mu.Unlock()
	if !served {
		t.Fatalf("%s: logprobs %s are not those the server returned", where, it.Logprobs)
	}
}

func TestARTResumeTrainsNoStepTwice(t *testing.T) {
	t.Run("interrupted after ART trained", func(t *testing.T) {
		f := newFakeART(t, "0.5.0")
		opts := options(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f.afterTrain = func(n int) {
			if n == 2 {
				cancel() // grpo stops before committing step 2
			}
		}
		r := MustOpen(t, artConfig(t, f, "resume", 3), opts)
		if err := r.Play(ctx); err == nil {
			t.Fatal("Play survived its context")
		}
		r.Close()
		if last, _, _ := opts.Store.LastStep(context.Background(), "resume"); last != 1 {
			t.Fatalf("after the interruption: last committed step %d, want 1", last)
		}
		if _, step := f.trained(); step != 2 {
			t.Fatalf("after the interruption: ART step %d, want 2", step)
		}
		playReopened(t, opts, "resume")
		if trains, step := f.trained(); len(trains) != 3 || step != 3 {
			t.Fatalf("%d training calls, ART step %d; want 3 and 3: step 2 is not trained again", len(trains), step)
		}
		checkStepsTrained(t, opts.Store, "resume", f)
	})
	t.Run("failed before ART trained", func(t *testing.T) {
		f := newFakeART(t, "0.5.0")
		f.failTrain[2] = true // the second /_train_model answers 500
		opts := options(t)
		r := MustOpen(t, artConfig(t, f, "resume", 3), opts)
		err := r.Play(context.Background())
		if err == nil || !strings.Contains(err.Error(), "CUDA out of memory") {
			t.Fatalf("Play: %v, want ART's 500", err)
		}
		r.Close()
		playReopened(t, opts, "resume")
		if trains, step := f.trained(); len(trains) != 3 || step != 3 || f.count("/_train_model") != 4 {
			t.Fatalf("%d trained, ART step %d, %d requests; want 3, 3 and 4: step 2 is sent again once", len(trains), step, f.count("/_train_model"))
		}
		checkStepsTrained(t, opts.Store, "resume", f)
	})
}

func playReopened(t *testing.T, opts run.Options, name string) {
	t.Helper()
	r, err := run.Reopen(context.Background(), name, opts)
	if err != nil {
		t.Fatalf("Reopen: %v", err)
	}
	defer r.Close()
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("resumed Play: %v", err)
	}
}

// checkStepsTrained checks that steps 1 to 3 are committed, each with the
// adapter of ART's step of the same number.
func checkStepsTrained(t *testing.T, s *checkpoint.Store, name string, f *fakeART) {
	t.Helper()
	_, steps, _, err := s.Snapshot(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 {
		t.Fatalf("%d steps committed, want 4", len(steps))
	}
	for _, st := range steps[1:] {
		if st.Job == nil || st.Adapter == nil || st.Adapter.Name != f.servedName(st.Step) {
			t.Errorf("step %d: job %+v adapter %+v, want adapter %s", st.Step, st.Job, st.Adapter, f.servedName(st.Step))
		}
	}
}

func TestARTRefusals(t *testing.T) {
	t.Run("unsupported version", func(t *testing.T) {
		f := newFakeART(t, "0.5.3")
		_, err := run.Open(context.Background(), artConfig(t, f, "old", 1), options(t))
		if err == nil || !strings.Contains(err.Error(), "supported: the `art run` backend server of openpipe-art 0.4.0 to 0.5.0") {
			t.Fatalf("Open: %v, want the supported range", err)
		}
		if n := f.count("/register"); n != 0 {
			t.Errorf("%d /register calls to an unsupported server", n)
		}
	})
	t.Run("advantage ART would rescale", func(t *testing.T) {
		f := newFakeART(t, "0.4.0")
		cfg := artConfig(t, f, "drgrpo", 1)
		cfg.GRPO.Advantage.StdNormalize = false
		_, err := run.Open(context.Background(), cfg, options(t))
		if err == nil || !strings.Contains(err.Error(), "grpo.advantage.std_normalize: false is not accepted with trainer.kind: art") {
			t.Fatalf("Open: %v, want std_normalize refused", err)
		}
	})
	t.Run("model already trained", func(t *testing.T) {
		f := newFakeART(t, "0.5.0")
		f.step = 4
		_, err := run.Open(context.Background(), artConfig(t, f, "again", 1), options(t))
		if err == nil || !strings.Contains(err.Error(), "ART already holds model grpo/again at step 4") {
			t.Fatalf("Open: %v, want the trained model refused", err)
		}
		if n := f.count("/_prepare_backend_for_training"); n != 0 {
			t.Errorf("%d prepare calls", n)
		}
	})
}

// TestARTExampleConfig plays examples/art/grpo.yaml against the fake ART
// server, shrunk to two steps of small tables so that it runs in seconds.
func TestARTExampleConfig(t *testing.T) {
	cfg, err := config.Load("../examples/art/grpo.yaml")
	if err != nil {
		t.Fatalf("examples/art/grpo.yaml: %v", err)
	}
	if cfg.Trainer.Kind != config.TrainerART || cfg.Trainer.URL != "http://127.0.0.1:7999" || len(cfg.Inference.Endpoints) != 0 {
		t.Fatalf("example: trainer %s at %s, %d endpoints; want art at ART's default port and none", cfg.Trainer.Kind, cfg.Trainer.URL, len(cfg.Inference.Endpoints))
	}
	f := newFakeART(t, "0.5.0")
	cfg.Trainer.URL = f.srv.URL
	cfg.Run.Steps, cfg.Env.N, cfg.Env.Rounds = 2, 3, 3
	cfg.GRPO.Groups, cfg.GRPO.EpisodesPerGroup = 2, 3
	cfg.Validation.N, cfg.Validation.Episodes = []int{3}, 2
	opts := options(t)
	r := MustOpen(t, cfg, opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	if trains, step := f.trained(); len(trains) != 2 || step != 2 {
		t.Fatalf("%d training calls, ART step %d; want 2 and 2", len(trains), step)
	}
}

// TestARTSendsZeroAdvantages scripts the episodes of one group so that the
// middle one's advantage is exactly 0, and checks that ART receives it.
// Under the paper reward with delta 0.5 (idle = thinks / valid actions), on
// 3 philosophers over 2 rounds: silence (no action) scores 1; philosopher 0
// taking and putting down its left fork and philosopher 1 taking its left
// fork, the other three actions thinks, scores 1 - 0.5*3/6 = 0.75; thinking
// throughout scores 0.5. Mean 0.75 (exact in binary), population std
// sqrt(1/24) = 0.204124: advantages 1.224739, 0, -1.224739.
func TestARTSendsZeroAdvantages(t *testing.T) {
	f := newFakeART(t, "0.4.0") // no scale_rewards: the client checks each group's std too
	cfg := artConfig(t, f, "zeros", 1)
	cfg.Env.Rounds = 2
	cfg.Reward.Function = rollout.Paper
	cfg.Reward.Weights.Delta = 0.5
	cfg.GRPO.Groups, cfg.GRPO.ResampleZeroVariance = 1, false
	episode := map[int64]int{} // request seed -> episode in the group
	for e := range cfg.GRPO.EpisodesPerGroup {
		sample := rollout.RequestSeed(cfg.TrainSeed(1, 0), e, -1)
		for id := range cfg.Env.N {
			for round := range 5 {
				episode[rollout.RequestSeed(sample, id, round)&0x7fffffff] = e
			}
		}
	}
	f.script = func(seed int64, s rollout.State) string {
		e, ok := episode[seed]
		switch {
		case !ok: // validation
			return rollout.Think
		case e == 0:
			return "I would rather not."
		case e == 1 && s.ID == 0 && s.Holding.Left:
			return rollout.PutDownLeft
		case e == 1 && (s.ID == 0 || s.ID == 1) && !s.Holding.Left:
			return rollout.PickUpLeft
		}
		return rollout.Think
	}
	opts := options(t)
	r := MustOpen(t, cfg, opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	trains, _ := f.trained()
	if len(trains) != 1 {
		t.Fatalf("%d training calls, want 1", len(trains))
	}
	var b artTrainBody
	if err := json.Unmarshal(trains[0], &b); err != nil {
		t.Fatal(err)
	}
	if len(b.TrajectoryGroups) != 1 || len(b.TrajectoryGroups[0].Trajectories) != 9 {
		t.Fatalf("%d groups, want 1 of 3 episodes x 3 philosophers: %.400s", len(b.TrajectoryGroups), trains[0])
	}
	want := []struct{ reward, adv float64 }{{1, 1.224739}, {0.75, 0}, {0.5, -1.224739}}
	for i, tr := range b.TrajectoryGroups[0].Trajectories {
		w := want[i/3]
		if tr.Metrics["grpo_reward"] != w.reward || math.Abs(tr.Reward-w.adv) > 1e-6 || (w.adv == 0 && tr.Reward != 0) {
			t.Errorf("trajectory %d: reward sent %v (grpo_reward %v), want advantage %v (reward %v)", i, tr.Reward, tr.Metrics["grpo_reward"], w.adv, w.reward)
		}
	}
	_, steps, _, err := opts.Store.Snapshot(context.Background(), "zeros")
	if err != nil {
		t.Fatal(err)
	}
	checkTrainBody(t, f, trains[0], steps[1], cfg.GRPO.Advantage)
}

// TestARTSubmitErrorNamesTheJob: ART's step read when a job is submitted
// (has ART trained it already?) that fails fails the run naming the job
// once; it named only the model.
func TestARTSubmitErrorNamesTheJob(t *testing.T) {
	f := newFakeART(t, "0.5.0")
	// The fourth step read is step 1's Submit's (the third is its Before's).
	f.failStep[4] = true
	opts := options(t)
	r := MustOpen(t, artConfig(t, f, "sub", 1), opts)
	err := r.Play(context.Background())
	rec := state(t, opts.Store, "sub")
	want := "step 1: ART job sub." + rec.ID + "/step-0001: ART step of sub: POST " + f.srv.URL + "/_get_step: 400 Bad Request: model not registered"
	if err == nil || err.Error() != want {
		t.Fatalf("Play: %v\nwant  %s", err, want)
	}
	if n := f.count("/_get_step"); n != 4 {
		t.Fatalf("%d /_get_step requests, want 4", n)
	}
}

// TestARTWaitErrorNamesTheJobOnce: a job whose training fails, or whose
// last look at ART's step before training fails, fails the run naming the
// job once; the orchestrator named it again ("trainer job ID: ART job
// ID: ...") or named it where ART's client did not.
func TestARTWaitErrorNamesTheJobOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(f *fakeART)
		want string // after "step 1: ART job ID: ", URL for ART's
	}{
		{"step read", func(f *fakeART) { f.failStep[5] = true }, // after Submit's, Wait's own look
			"ART step of wt: POST URL/_get_step: 400 Bad Request: model not registered"},
		{"training", func(f *fakeART) { f.failTrain[1] = true },
			"ART train wt: POST URL/_train_model: 500 Internal Server Error: CUDA out of memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeART(t, "0.5.0")
			tc.fail(f)
			opts := options(t)
			r := MustOpen(t, artConfig(t, f, "wt", 1), opts)
			err := r.Play(context.Background())
			rec := state(t, opts.Store, "wt")
			want := "step 1: ART job wt." + rec.ID + "/step-0001: " + strings.ReplaceAll(tc.want, "URL", f.srv.URL)
			if err == nil || err.Error() != want {
				t.Fatalf("Play: %v\nwant  %s", err, want)
			}
		})
	}
}
