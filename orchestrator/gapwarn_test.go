package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/trainer"
)

// diagnosingTrainer is the reference backend's job API behind an
// httptest proxy that adds the diagnostics of DESIGN §5 to every job's
// metrics (the reference trainer reports none) and keeps the create
// bodies it was sent.
type diagnosingTrainer struct {
	mu      sync.Mutex
	created [][]byte
}

func newDiagnosingTrainer(t *testing.T, real http.Handler, gapAt func(step int) float64) (*diagnosingTrainer, string) {
	d := &diagnosingTrainer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			d.mu.Lock()
			d.created = append(d.created, body)
			d.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		rec := httptest.NewRecorder()
		real.ServeHTTP(rec, r)
		var job trainer.Job
		if r.Method != http.MethodGet || rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &job) != nil || job.Metrics == nil {
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		var s int
		if _, err := fmt.Sscanf(job.ID[strings.LastIndex(job.ID, "/step-")+1:], "step-%d", &s); err != nil {
			t.Errorf("job id %q: %v", job.ID, err)
		}
		gap, step, entropy, norm := gapAt(s), 7.0, 1.25, 0.5
		job.Metrics.SamplerLogprobGap, job.Metrics.OptimizerStep, job.Metrics.Entropy, job.Metrics.UpdateNorm = &gap, &step, &entropy, &norm
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(job)
	}))
	t.Cleanup(srv.Close)
	return d, srv.URL
}

// warnings collects a logger's warnings.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (h *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnings) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = append(h.msgs, r.Message)
	return nil
}
func (h *warnings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnings) WithGroup(string) slog.Handler      { return h }

func (h *warnings) about(word string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, m := range h.msgs {
		if strings.Contains(m, word) {
			n++
		}
	}
	return n
}

// gapRun plays a steps-step run of trainer.kind jobs against a trainer
// reporting gapAt(step) for each step's job, with the optimizer's
// hyperparameters set and at most lag steps between sampling and training,
// and returns its warnings, its job_state events' metrics and the trainer.
func gapRun(t *testing.T, gapAt func(step int) float64, steps, lag int) (*warnings, []*orchestrator.JobMetrics, *diagnosingTrainer, *env) {
	t.Helper()
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	d, url := newDiagnosingTrainer(t, e.backend.TrainerHandler(), gapAt)
	cfg, err := config.Parse(fmt.Appendf(nil, `
run: {name: gap, steps: %d, seed: 3}
grpo: {max_off_policy_steps: %d}
validation: {episodes: 8}
inference: {model: %s, endpoints: [{url: %q}], adapters: {keep: 1}}
trainer:
  kind: jobs
  url: %q
  base_model: %s
  hyperparameters: {learning_rate: %v, mini_batches: 4, warmup_steps: 2, reset_optimizer: true}
`, steps, lag, refmodel.BaseModelName, e.inferURL, url, refmodel.BaseModelName, refmodel.DefaultLearningRate))
	if err != nil {
		t.Fatal(err)
	}
	w := &warnings{}
	var mu sync.Mutex
	var metrics []*orchestrator.JobMetrics
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Adapters: e.fleet, Logger: slog.New(w),
		Trainer: trainer.NewJobClient(url, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond}),
		Events: func(ev orchestrator.Event) {
			if j := ev.JobState; j != nil && j.Metrics != nil {
				mu.Lock()
				metrics = append(metrics, j.Metrics)
				mu.Unlock()
			}
		}})
	if err := o.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return w, metrics, d, e
}

// TestSamplerLogprobGapWarnsOnce: a trainer reporting a gap of 0.5 nats on
// every job of a three-step run draws exactly one warning; the run's
// diagnostics reach the step records and the job_state events, and the
// create bodies carry the optimizer's hyperparameters.
func TestSamplerLogprobGapWarnsOnce(t *testing.T) {
	w, metrics, d, e := gapRun(t, func(int) float64 { return 0.5 }, 3, 0)
	if got, want := w.about("does not score the sampled tokens"), 1; got != want {
		t.Fatalf("%d gap warnings over 3 jobs, want %d (all warnings: %q)", got, want, w.msgs)
	}

	_, steps, _ := snapshot(t, e.store, "gap")
	want := map[string]float64{"sampler_logprob_gap": 0.5, "optimizer_step": 7, "entropy": 1.25, "update_norm": 0.5}
	jobs := 0
	for _, s := range steps {
		if s.Job == nil {
			continue
		}
		jobs++
		for k, v := range want {
			if got, ok := s.Job.Metrics[k]; !ok || got != v {
				t.Errorf("step %d job metrics[%q]=%v (present %v), want %v", s.Step, k, got, ok, v)
			}
		}
		if _, ok := s.Job.Metrics["loss"]; !ok {
			t.Errorf("step %d job metrics %v lost the loss", s.Step, s.Job.Metrics)
		}
	}
	if jobs != 3 {
		t.Fatalf("%d steps with a job, want 3", jobs)
	}
	if len(metrics) == 0 {
		t.Fatal("no job_state event carried metrics")
	}
	for _, m := range metrics {
		if m.SamplerLogprobGap == nil || *m.SamplerLogprobGap != 0.5 || m.OptimizerStep == nil || *m.OptimizerStep != 7 ||
			m.Entropy == nil || *m.Entropy != 1.25 || m.UpdateNorm == nil || *m.UpdateNorm != 0.5 {
			t.Fatalf("job_state metrics %+v, want gap 0.5, optimizer_step 7, entropy 1.25, update_norm 0.5", m)
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.created) != 3 {
		t.Fatalf("%d jobs created, want 3", len(d.created))
	}
	for _, body := range d.created {
		var req struct {
			Hyperparameters map[string]any `json:"hyperparameters"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		h := req.Hyperparameters
		if h["mini_batches"] != 4.0 || h["warmup_steps"] != 2.0 || h["reset_optimizer"] != true {
			t.Fatalf("create body hyperparameters %v, want mini_batches 4, warmup_steps 2, reset_optimizer true", h)
		}
	}
}

// TestSamplerLogprobGapBelowThreshold: a gap of 0.01 nats draws no
// warning.
func TestSamplerLogprobGapBelowThreshold(t *testing.T) {
	w, _, _, _ := gapRun(t, func(int) float64 { return 0.01 }, 2, 0)
	if got := w.about("does not score the sampled tokens"); got != 0 {
		t.Fatalf("%d gap warnings at a gap of 0.01, want none (threshold %v)", got, orchestrator.LogprobGapWarning)
	}
}

// TestReferenceBackendScoresWhatItSampled: the reference trainer reports
// a sampler logprob gap of 0 (to rounding) on a synchronous run at
// temperature 1, so the logprobs grpo forwards are the sampled tokens'
// own; it reports entropy and update norm, and no optimizer step (it
// keeps no optimizer state).
func TestReferenceBackendScoresWhatItSampled(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	w := &warnings{}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet, Logger: slog.New(w)})
	if err := o.Start(context.Background(), smallConfig(t, "ref", 2)); err != nil {
		t.Fatal(err)
	}
	_, steps, _ := snapshot(t, e.store, "ref")
	jobs := 0
	for _, s := range steps {
		if s.Job == nil {
			continue
		}
		jobs++
		m := s.Job.Metrics
		gap, ok := m["sampler_logprob_gap"]
		if !ok || gap > 1e-9 {
			t.Errorf("step %d: sampler_logprob_gap %v (reported %v), want 0 to rounding", s.Step, gap, ok)
		}
		if m["entropy"] <= 0 || m["update_norm"] <= 0 {
			t.Errorf("step %d: entropy %v, update_norm %v; want both > 0", s.Step, m["entropy"], m["update_norm"])
		}
		if _, ok := m["optimizer_step"]; ok {
			t.Errorf("step %d: optimizer_step %v reported by a trainer without optimizer state", s.Step, m["optimizer_step"])
		}
	}
	if jobs == 0 {
		t.Fatal("no step trained a job")
	}
	if got := w.about("does not score the sampled tokens"); got != 0 {
		t.Fatalf("%d gap warnings on the reference backend, want none", got)
	}
}

// TestSamplerLogprobGapOfLaggedJobs: with an asynchronous pipeline, a gap
// of 0.5 on the jobs whose rollouts an older policy sampled draws no
// warning (the lag is part of it), one on step 1's on-policy job does.
func TestSamplerLogprobGapOfLaggedJobs(t *testing.T) {
	for _, tt := range []struct {
		name     string
		gapAt    func(step int) float64
		warnings int
	}{
		{"lagged jobs", func(s int) float64 { return map[bool]float64{true: 0.01, false: 0.5}[s == 1] }, 0},
		{"every job", func(int) float64 { return 0.5 }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w, _, _, e := gapRun(t, tt.gapAt, 3, 1)
			_, steps, _ := snapshot(t, e.store, "gap")
			var lags []int
			for _, s := range steps {
				if s.Train != nil && s.Train.OffPolicyLag != nil {
					lags = append(lags, *s.Train.OffPolicyLag)
				}
			}
			// The test means something only if steps 2 and 3 trained on
			// rollouts of an older policy.
			if got, want := fmt.Sprint(lags), "[0 1 1]"; got != want {
				t.Fatalf("off-policy lags of steps 1-3: %s, want %s", got, want)
			}
			if got := w.about("does not score the sampled tokens"); got != tt.warnings {
				t.Fatalf("%d gap warnings, want %d", got, tt.warnings)
			}
		})
	}
}
