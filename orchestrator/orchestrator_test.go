package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
	"github.com/grpo-dev/grpo/trainer"
)

// env is a run's world: the reference backend behind real HTTP servers,
// and a store.
type env struct {
	store    *checkpoint.Store
	chat     *inference.ChatClient
	fleet    *inference.Fleet
	trainer  *trainer.JobClient
	backend  *refmodel.Backend
	inferURL string
	stop     func() // the "process" dies: servers and backend stop
}

// newEnv starts the reference backend on dataDir (reusing it restarts the
// backend with the state it persisted, as after a crash).
func newEnv(t *testing.T, dataDir, db string) *env {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: dataDir, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	inf := httptest.NewServer(b.InferenceHandler())
	tr := httptest.NewServer(b.TrainerHandler())
	var once sync.Once
	stop := func() { once.Do(func() { inf.Close(); tr.Close(); b.Close() }) }
	t.Cleanup(stop)
	chat := inference.NewChatClient(inf.URL+"/v1", inference.ChatOptions{Retry: &httpx.Policy{Retries: 3, BaseDelay: time.Millisecond}})
	return &env{
		stop:  stop,
		store: checkpoint.New(db, checkpoint.Options{}),
		chat:  chat,
		fleet: inference.NewFleet([]inference.Replica{{Chat: chat, Admin: inference.NewAdminClient(inf.URL+"/v1", inference.AdminOptions{})}},
			inference.FleetOptions{OutageWindow: -1}),
		trainer:  trainer.NewJobClient(tr.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond}),
		backend:  b,
		inferURL: inf.URL + "/v1",
	}
}

func (e *env) orchestrator(events func(orchestrator.Event)) *orchestrator.Orchestrator {
	return orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet, Events: events})
}

// refDefaults point a config at the embedded reference backend.
var refDefaults = config.EmbeddedDefaults{Model: refmodel.BaseModelName, LearningRate: refmodel.DefaultLearningRate}

func smallConfig(t *testing.T, name string, steps int) config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
run: {name: %s, steps: %d, seed: 3}
validation: {episodes: 8}
inference: {adapters: {keep: 1}}
`, name, steps)), config.WithEmbedded(refDefaults))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func snapshot(t *testing.T, s *checkpoint.Store, name string) (checkpoint.Run, []checkpoint.Step, []checkpoint.Evaluation) {
	t.Helper()
	run, steps, evals, err := s.Snapshot(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return run, steps, evals
}

func TestRunEndToEndOnReferenceBackend(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	var mu sync.Mutex
	counts := map[string]int{}
	// Each split's calls and invalid outputs, as the episodes count them
	// and as the split's call observer sees them.
	type calls struct{ calls, invalid int }
	episodes, observed := map[string]calls{}, map[string]*calls{}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet,
		Events: func(ev orchestrator.Event) {
			mu.Lock()
			counts[ev.Type]++
			if d := ev.EpisodeFinished; d != nil {
				c := episodes[d.Split]
				episodes[d.Split] = calls{c.calls + d.Calls, c.invalid + d.Invalid}
			}
			mu.Unlock()
		},
		OnCall: func(split string) func(string, time.Duration, error) {
			c := &calls{}
			observed[split] = c
			return func(action string, _ time.Duration, err error) {
				if err != nil {
					t.Errorf("%s call failed: %v", split, err)
					return
				}
				mu.Lock()
				c.calls++
				if !slices.Contains(rollout.ToolNames[:], action) {
					c.invalid++
				}
				mu.Unlock()
			}
		},
	})
	cfg := smallConfig(t, "e2e", 4)
	if err := o.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	run, steps, evals := snapshot(t, e.store, "e2e")
	if run.State != checkpoint.StateSucceeded || len(steps) != 5 || len(evals) != 5 {
		t.Fatalf("state %s, %d steps, %d evaluations; want succeeded, 5, 5", run.State, len(steps), len(evals))
	}
	for i, s := range steps {
		if s.Step != i {
			t.Fatalf("steps[%d].Step = %d", i, s.Step)
		}
		if i == 0 {
			if s.Train != nil || s.Job != nil || s.Adapter != nil {
				t.Fatalf("step 0 should be the base model only: %+v", s)
			}
			continue
		}
		if s.Train == nil || s.Train.Episodes != 6 || len(s.Train.Groups) != 2 {
			t.Fatalf("step %d train stats %+v", i, s.Train)
		}
		if s.Job != nil {
			if s.Job.ID != trainer.JobID("e2e."+run.ID, i) || s.Job.State != trainer.StateSucceeded || s.Adapter.Name != trainer.AdapterName("e2e."+run.ID, i) {
				t.Fatalf("step %d job %+v adapter %+v", i, s.Job, s.Adapter)
			}
		}
		if evals[i].Episodes != 8 || len(evals[i].Rewards) != 8 {
			t.Fatalf("step %d evaluation %+v", i, evals[i])
		}
	}
	if counts[orchestrator.EventEpisodeFinished] != 4*6+5*8 || counts[orchestrator.EventRunFinished] != 1 || counts[orchestrator.EventValidationDone] != 5 {
		t.Fatalf("event counts %v", counts)
	}
	for _, split := range []string{"train", "validation"} {
		if got, want := observed[split], episodes[split]; got == nil || *got != want || want.calls == 0 {
			t.Errorf("%s calls observed %+v, want the episodes' %+v", split, got, want)
		}
	}
	// Adapters: the last and the best stay loaded (keep 1), older ones go.
	models, err := inference.NewAdminClient(e.inferURL, inference.AdminOptions{}).Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals)
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]bool{}
	for _, m := range models {
		loaded[m.ID] = true
	}
	last := steps[len(steps)-1].Adapter
	if last != nil && !loaded[last.Name] {
		t.Fatalf("last adapter %s not loaded: %v", last.Name, loaded)
	}
	if sel.Adapter != nil && !loaded[sel.Adapter.Name] {
		t.Fatalf("best adapter %s not loaded: %v", sel.Adapter.Name, loaded)
	}
	if len(loaded) > 3 { // base + best + last
		t.Fatalf("%d models loaded, want at most 3: %v", len(loaded), loaded)
	}
}

// rewards is a run's result as numbers: every step's train reward and
// validation rewards, to compare runs exactly.
func rewards(t *testing.T, s *checkpoint.Store, name string) string {
	_, steps, evals := snapshot(t, s, name)
	var b strings.Builder
	for _, st := range steps {
		fmt.Fprintf(&b, "step %d n %d", st.Step, st.N)
		if st.Train != nil {
			fmt.Fprintf(&b, " train %.12f", st.Train.RewardMean)
		}
		if st.Job != nil {
			fmt.Fprintf(&b, " loss %.12f", st.Job.Metrics["loss"])
		}
		b.WriteString("\n")
	}
	for _, ev := range evals {
		fmt.Fprintf(&b, "eval %d %.12f %v\n", ev.Step, ev.RewardMean, ev.Rewards)
	}
	return b.String()
}

func TestRunIsDeterministic(t *testing.T) {
	var got []string
	for range 2 {
		dir := t.TempDir()
		e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
		if err := e.orchestrator(nil).Start(context.Background(), smallConfig(t, "det", 3)); err != nil {
			t.Fatal(err)
		}
		got = append(got, rewards(t, e.store, "det"))
	}
	if got[0] != got[1] {
		t.Fatalf("two runs with one seed differ:\n%s\nvs\n%s", got[0], got[1])
	}
}

// TestResumeAfterInterruption stops a run at various moments (the process
// "dies": the backend restarts too, keeping only what it persisted) and
// resumes it; the result must equal an uninterrupted run's, with every
// step stored exactly once.
func TestResumeAfterInterruption(t *testing.T) {
	const steps = 3
	dir := t.TempDir()
	ref := newEnv(t, filepath.Join(dir, "ref-data"), filepath.Join(dir, "ref.db"))
	if err := ref.orchestrator(nil).Start(context.Background(), smallConfig(t, "r", steps)); err != nil {
		t.Fatal(err)
	}
	want := rewards(t, ref.store, "r")

	for _, stop := range []struct {
		name  string
		event string
		step  int
	}{
		{"during base validation", orchestrator.EventEpisodeFinished, 0},
		{"during rollouts", orchestrator.EventEpisodeFinished, 2},
		{"job in flight", orchestrator.EventJobState, 2},
		{"adapter loaded, not committed", orchestrator.EventAdapterLoaded, 2},
		{"just committed", orchestrator.EventStepCommitted, 1},
	} {
		t.Run(stop.name, func(t *testing.T) {
			sub := t.TempDir()
			data, db := filepath.Join(sub, "data"), filepath.Join(sub, "grpo.db")
			ctx, cancel := context.WithCancel(context.Background())
			e := newEnv(t, data, db)
			var once sync.Once
			err := e.orchestrator(func(ev orchestrator.Event) {
				if ev.Type == stop.event && ev.Step == stop.step {
					once.Do(cancel)
				}
			}).Start(ctx, smallConfig(t, "r", steps))
			if err == nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run returned %v", err)
			}
			before, _, _ := snapshot(t, e.store, "r")
			if before.State != checkpoint.StateCancelled {
				t.Fatalf("state after interruption %s", before.State)
			}
			// "Restart": the old backend is gone; a new one opens the
			// same data dir.
			e.stop()
			e2 := newEnv(t, data, db)
			if err := e2.orchestrator(nil).Resume(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			// Resuming keeps the run's id, and with it its job ids.
			after, resumed, _ := snapshot(t, e2.store, "r")
			if after.ID == "" || after.ID != before.ID {
				t.Fatalf("run id %q after resume, want %q", after.ID, before.ID)
			}
			for _, s := range resumed {
				if s.Job != nil && s.Job.ID != trainer.JobID("r."+before.ID, s.Step) {
					t.Fatalf("step %d job %s after resume, want %s", s.Step, s.Job.ID, trainer.JobID("r."+before.ID, s.Step))
				}
			}
			if got := rewards(t, e2.store, "r"); got != want {
				t.Fatalf("resumed run differs from uninterrupted run:\n%s\nwant\n%s", got, want)
			}
			if err := e2.orchestrator(nil).Resume(context.Background(), "r"); !errors.Is(err, orchestrator.ErrRunFinished) {
				t.Fatalf("resuming a finished run: %v", err)
			}
		})
	}
}

// fakeTrainer answers the job API with a scripted outcome.
func fakeTrainer(t *testing.T, final trainer.Job, after time.Duration) *trainer.JobClient {
	var mu sync.Mutex
	created := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost:
			var req trainer.JobRequest
			if err := jsonDecode(r, &req); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			created[req.ID] = time.Now()
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
		case r.Method == http.MethodDelete:
			fmt.Fprintf(w, `{"id":%q,"state":"cancelled"}`, id)
		default:
			j := trainer.Job{ID: id, State: trainer.StateRunning, Progress: 0.5}
			if time.Since(created[id]) >= after {
				j = final
				j.ID = id
			}
			jsonEncode(w, j)
		}
	}))
	t.Cleanup(srv.Close)
	return trainer.NewJobClient(srv.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond})
}

func TestTrainerFailureFailsTheRun(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	e.trainer = fakeTrainer(t, trainer.Job{State: trainer.StateFailed, Error: "CUDA out of memory"}, 0)
	err := e.orchestrator(nil).Start(context.Background(), smallConfig(t, "f", 2))
	if !errors.Is(err, trainer.ErrJobFailed) || !strings.Contains(err.Error(), "CUDA out of memory") || !strings.Contains(err.Error(), "/step-0001") || !strings.Contains(err.Error(), "to retry the step, resume with --retry-job (the step's job is submitted again under a new id; a daemon's run: POST /api/v1/runs/RUN/resume with {\"retry_job\": true}), or remove the failed job from the trainer first") || strings.Count(err.Error(), "trainer job ") != 1 {
		t.Fatalf("err = %v", err)
	}
	run, steps, _ := snapshot(t, e.store, "f")
	if run.State != checkpoint.StateFailed || len(steps) != 1 || !strings.Contains(run.Error, "CUDA out of memory") {
		t.Fatalf("state %s error %q, %d steps; want failed with the job's error and only step 0", run.State, run.Error, len(steps))
	}
	inf, err := e.store.GetInFlight(context.Background(), "f")
	if err != nil || inf == nil || inf.JobID != "f."+run.ID+"/step-0001" {
		t.Fatalf("in-flight record after a failed job: %+v, %v", inf, err)
	}
}

// TestEndRecordedAfterLongRun: the bound on recording a run's end starts
// when the loop stops, not when the run starts — a run that outlasted it
// was left "running" with "set state: context deadline exceeded".
//
// The bound must outlast recording the end (a store write, which a loaded
// CI machine can hold up for more than the 300ms this test once gave it),
// and the run must outlast the bound: its job ends that long after it was
// submitted, after the run started.
func TestEndRecordedAfterLongRun(t *testing.T) {
	const bound = 2 * time.Second
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	e.trainer = fakeTrainer(t, trainer.Job{State: trainer.StateFailed, Error: "boom"}, bound)
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet, EndTimeout: bound})
	if err := o.Start(context.Background(), smallConfig(t, "long", 1)); !errors.Is(err, trainer.ErrJobFailed) {
		t.Fatalf("err = %v, want the failed job", err)
	}
	if run, _, _ := snapshot(t, e.store, "long"); run.State != checkpoint.StateFailed || !strings.Contains(run.Error, "boom") {
		t.Fatalf("state %s error %q; want failed with the job's error", run.State, run.Error)
	}
}

func TestTrainerJobTimeout(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	e.trainer = fakeTrainer(t, trainer.Job{State: trainer.StateSucceeded}, time.Hour)
	cfg := smallConfig(t, "slow", 2)
	cfg.Trainer.JobTimeout = config.Duration(100 * time.Millisecond)
	err := e.orchestrator(nil).Start(context.Background(), cfg)
	if !errors.Is(err, trainer.ErrJobTimeout) {
		t.Fatalf("err = %v, want a job timeout", err)
	}
	if run, _, _ := snapshot(t, e.store, "slow"); run.State != checkpoint.StateFailed {
		t.Fatalf("state %s", run.State)
	}
}

// noCalls fails the test if the orchestrator trains or loads anything.
type noCalls struct{ t *testing.T }

func (n noCalls) Submit(context.Context, trainer.JobRequest) (trainer.Job, error) {
	n.t.Error("Submit called on a step without signal")
	return trainer.Job{}, errors.New("unexpected")
}
func (n noCalls) Wait(context.Context, string, time.Duration, func(trainer.Job)) (trainer.Job, error) {
	return trainer.Job{}, errors.New("unexpected")
}
func (n noCalls) Cancel(context.Context, string) error { return nil }
func (n noCalls) LoadEverywhere(context.Context, string, string) error {
	n.t.Error("LoadEverywhere called without a job")
	return nil
}
func (n noCalls) UnloadEverywhere(context.Context, string) error { return nil }

func TestStepWithoutSignalIsRecordedWithoutJob(t *testing.T) {
	// Everybody always thinks: every episode scores -0.1 (shaped), every
	// group has zero variance, and resampling cannot help.
	srv := rollouttest.New(func(rollout.State) string { return rollout.Think })
	defer srv.Close()
	dir := t.TempDir()
	store := checkpoint.New(filepath.Join(dir, "grpo.db"), checkpoint.Options{})
	cfg := smallConfig(t, "flat", 2)
	cfg.Inference.Endpoints = []config.Endpoint{{URL: srv.BaseURL()}}
	cfg.Trainer.Kind = "jobs"
	cfg.GRPO.ResampleZeroVariance = true
	cfg.GRPO.MaxResamples = 3
	o := orchestrator.New(orchestrator.Options{Store: store, Completer: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{}),
		Trainer: noCalls{t}, Adapters: noCalls{t}})
	if err := o.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	run, steps, evals := snapshot(t, store, "flat")
	if run.State != checkpoint.StateSucceeded || len(steps) != 3 || len(evals) != 3 {
		t.Fatalf("state %s, %d steps, %d evals", run.State, len(steps), len(evals))
	}
	for _, s := range steps[1:] {
		tr := s.Train
		if s.Job != nil || s.Adapter != nil || tr == nil {
			t.Fatalf("step %d: job %+v adapter %+v train %+v", s.Step, s.Job, s.Adapter, tr)
		}
		// 2 groups + 3 replacements, all zero-variance; 30 episodes.
		if len(tr.Groups) != 5 || tr.ZeroVarianceGroups != 2 || tr.Episodes != 15 || tr.Trajectories != 0 || tr.FracRewardZeroStd != 1 {
			t.Fatalf("step %d train stats: groups %d zero %d episodes %d trajectories %d frac %v", s.Step, len(tr.Groups), tr.ZeroVarianceGroups, tr.Episodes, tr.Trajectories, tr.FracRewardZeroStd)
		}
		if math.Abs(tr.RewardMean+0.1) > 1e-12 {
			t.Fatalf("step %d train reward %v, want -0.1", s.Step, tr.RewardMean)
		}
		for _, g := range tr.Groups[2:] {
			if !g.Resampled {
				t.Fatalf("replacement group %s not marked resampled", g.ID)
			}
		}
	}
}

func TestCurriculum(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []int // n of steps 0..3
	}{
		{"schedule", `curriculum: {schedule: "5@0,6@2,7@3"}`, []int{5, 5, 6, 7}},
		// Every validation reaches -1 (shaped rewards are >= -0.1):
		// promoted after step 0 and again after step 1, then capped.
		{"promotion reached", `curriculum: {promote: {sizes: [5, 6, 7], threshold: -1}}`, []int{5, 6, 7, 7}},
		{"promotion not reached", `curriculum: {promote: {sizes: [5, 6], threshold: 5}}`, []int{5, 5, 5, 5}},
		// deadlock_rate is "reached" when at most the threshold: 1 always is.
		{"promotion on deadlock rate", "curriculum: {promote: {sizes: [5, 6], threshold: 1}}\nvalidation: {metric: deadlock_rate, episodes: 8}", []int{5, 6, 6, 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
			yaml := "run: {name: c, steps: 3}\nvalidation: {episodes: 8}\n" + c.yaml
			if strings.Contains(c.yaml, "validation:") {
				yaml = "run: {name: c, steps: 3}\n" + c.yaml
			}
			cfg, err := config.Parse([]byte(yaml), config.WithEmbedded(refDefaults))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.orchestrator(nil).Start(context.Background(), cfg); err != nil {
				t.Fatal(err)
			}
			_, steps, _ := snapshot(t, e.store, "c")
			for i, s := range steps {
				if s.N != c.want[i] {
					t.Fatalf("step %d n = %d, want %v", i, s.N, c.want)
				}
				if s.Train != nil {
					for _, g := range s.Train.Groups {
						if g.N != c.want[i] {
							t.Fatalf("step %d group %s played n=%d", i, g.ID, g.N)
						}
					}
				}
			}
		})
	}
}

// TestJobIDsUniquePerRun: two stores holding a run of the same name, one
// trainer: each run trains its own steps (its job ids carry its random
// id), rather than reattaching to the other's jobs.
func TestJobIDsUniquePerRun(t *testing.T) {
	dir := t.TempDir()
	e1 := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "a.db"))
	e2 := *e1
	e2.store = checkpoint.New(filepath.Join(dir, "b.db"), checkpoint.Options{})
	seen := map[string]string{}
	loaded := map[string]string{} // adapter name -> path, as loaded into the one inference server
	for _, e := range []*env{e1, &e2} {
		var names []string
		err := e.orchestrator(func(ev orchestrator.Event) {
			if ev.AdapterLoaded != nil {
				names = append(names, ev.AdapterLoaded.Adapter.Name)
				if p, ok := loaded[ev.AdapterLoaded.Adapter.Name]; ok && p != ev.AdapterLoaded.Adapter.Path {
					t.Errorf("adapter %s loaded from %s and %s", ev.AdapterLoaded.Adapter.Name, p, ev.AdapterLoaded.Adapter.Path)
				}
				loaded[ev.AdapterLoaded.Adapter.Name] = ev.AdapterLoaded.Adapter.Path
			}
		}).Start(context.Background(), smallConfig(t, "same", 2))
		if err != nil {
			t.Fatal(err)
		}
		run, steps, _ := snapshot(t, e.store, "same")
		if len(run.ID) != 16 {
			t.Fatalf("run id %q, want 16 hex digits", run.ID)
		}
		jobs := 0
		for _, s := range steps {
			if s.Job == nil {
				continue
			}
			jobs++
			if want := trainer.JobID("same."+run.ID, s.Step); s.Job.ID != want {
				t.Fatalf("%s: step %d job %s, want %s", e.store.Path(), s.Step, s.Job.ID, want)
			}
			if want := trainer.AdapterName("same."+run.ID, s.Step); s.Adapter == nil || s.Adapter.Name != want || !slices.Contains(names, want) {
				t.Fatalf("%s: step %d adapter %+v, want %s loaded (loaded: %v)", e.store.Path(), s.Step, s.Adapter, want, names)
			}
			if other, ok := seen[s.Job.ID]; ok {
				t.Fatalf("job %s trained for %s and %s", s.Job.ID, other, e.store.Path())
			}
			seen[s.Job.ID] = e.store.Path()
		}
		if jobs != 2 {
			t.Fatalf("%s: %d steps trained, want 2", e.store.Path(), jobs)
		}
	}
	if len(seen) != 4 {
		t.Fatalf("%d distinct jobs, want 4", len(seen))
	}
	paths := map[string]bool{}
	for _, p := range loaded {
		paths[p] = true
	}
	if len(loaded) != 4 || len(paths) != 4 {
		t.Fatalf("%d distinct adapter names from %d distinct paths loaded into the one server, want 4 and 4: %v", len(loaded), len(paths), loaded)
	}
}

// TestOneWriterPerRun: while one orchestrator plays a run, another one's
// Resume is refused with checkpoint.ErrLeased and records nothing; the
// first finishes the run.
func TestOneWriterPerRun(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	var second error
	var state string
	var once sync.Once
	err := e.orchestrator(func(ev orchestrator.Event) {
		if ev.Type == orchestrator.EventStepCommitted && ev.Step == 1 {
			once.Do(func() {
				second = e.orchestrator(nil).Resume(context.Background(), "w")
				run, _, _ := snapshot(t, e.store, "w")
				state = run.State
			})
		}
	}).Start(context.Background(), smallConfig(t, "w", 2))
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(second, checkpoint.ErrLeased) {
		t.Fatalf("second Resume while playing: %v, want ErrLeased", second)
	}
	if state != checkpoint.StateRunning {
		t.Fatalf("state after the refused Resume: %s, want running", state)
	}
	run, steps, _ := snapshot(t, e.store, "w")
	if run.State != checkpoint.StateSucceeded || len(steps) != 3 {
		t.Fatalf("run %s with %d steps, want succeeded with 3", run.State, len(steps))
	}
	if info, _, err := e.store.GetLease(context.Background(), "w", checkpoint.LeaseOptions{}); err != nil || info != nil {
		t.Fatalf("lease left after the run: %+v, %v", info, err)
	}
}

// TestResumeOnlyRunning: with OnlyRunning, a run that another process
// ended (cancelled here) is not revived: Resume refuses with
// ErrNotRunning, recording nothing and leaving no lease; without it the
// same run is resumed, as `grpo run --resume` does.
func TestResumeOnlyRunning(t *testing.T) {
	sub := t.TempDir()
	e := newEnv(t, filepath.Join(sub, "data"), filepath.Join(sub, "grpo.db"))
	ctx, cancel := context.WithCancel(context.Background())
	err := e.orchestrator(func(ev orchestrator.Event) {
		if ev.Type == orchestrator.EventStepCommitted && ev.Step == 1 {
			cancel()
		}
	}).Start(ctx, smallConfig(t, "r", 3))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	before, steps, _ := snapshot(t, e.store, "r")
	if before.State != checkpoint.StateCancelled {
		t.Fatalf("state after interruption %s", before.State)
	}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet, OnlyRunning: true})
	if err := o.Resume(context.Background(), "r"); !errors.Is(err, checkpoint.ErrNotRunning) {
		t.Fatalf("Resume of a cancelled run with OnlyRunning: %v, want ErrNotRunning", err)
	}
	after, again, _ := snapshot(t, e.store, "r")
	if after.State != checkpoint.StateCancelled || after.Updated != before.Updated || len(again) != len(steps) {
		t.Fatalf("the refused resume changed the run: state %s, %d steps (was %d)", after.State, len(again), len(steps))
	}
	if _, live, err := e.store.GetLease(context.Background(), "r", checkpoint.LeaseOptions{}); err != nil || live {
		t.Fatalf("lease after the refused resume: live %v, %v", live, err)
	}
	if err := e.orchestrator(nil).Resume(context.Background(), "r"); err != nil {
		t.Fatalf("Resume without OnlyRunning: %v", err)
	}
	if r, _, _ := snapshot(t, e.store, "r"); r.State != checkpoint.StateSucceeded {
		t.Fatalf("state after resume %s", r.State)
	}
}

// TestResumeAsyncPromotion: with the asynchronous pipeline and a
// promotion curriculum, a run stopped after a commit and resumed trains
// every step at the table size the uninterrupted run did (the steps
// sampled ahead after the restart took their size from every validation
// committed before it, not from those before their own turn).
func TestResumeAsyncPromotion(t *testing.T) {
	cfg := func(t *testing.T) config.Config {
		c := smallConfig(t, "p", 8)
		c.GRPO.MaxOffPolicySteps = 2
		c.Curriculum.Promote = config.PromoteRule{Sizes: []int{5, 6, 7, 8}, Threshold: 0.1}
		return c
	}
	dir := t.TempDir()
	ref := newEnv(t, filepath.Join(dir, "ref-data"), filepath.Join(dir, "ref.db"))
	var mu sync.Mutex
	announced := map[int]int{} // step_started's n, by step
	if err := ref.orchestrator(func(ev orchestrator.Event) {
		if ev.StepStarted != nil {
			mu.Lock()
			announced[ev.Step] = ev.StepStarted.N
			mu.Unlock()
		}
	}).Start(context.Background(), cfg(t)); err != nil {
		t.Fatal(err)
	}
	// Each step_started says the table size the step then stores.
	_, refSteps, _ := snapshot(t, ref.store, "p")
	for _, s := range refSteps {
		if announced[s.Step] != s.N {
			t.Errorf("step %d: step_started said n=%d, stored n=%d", s.Step, announced[s.Step], s.N)
		}
	}
	sizes := func(store *checkpoint.Store) string {
		_, steps, _ := snapshot(t, store, "p")
		var b strings.Builder
		for _, s := range steps {
			fmt.Fprintf(&b, "%d:%d ", s.Step, s.N)
		}
		return b.String()
	}
	want, wantRewards := sizes(ref.store), rewards(t, ref.store, "p")
	t.Logf("uninterrupted: %s", want)
	if !strings.Contains(want, ":6 ") {
		t.Fatalf("the uninterrupted run was never promoted (%s): the test shows nothing\n%s", want, wantRewards)
	}
	for _, after := range []int{1, 3} {
		t.Run(fmt.Sprintf("stopped after step %d", after), func(t *testing.T) {
			sub := t.TempDir()
			data, db := filepath.Join(sub, "data"), filepath.Join(sub, "grpo.db")
			ctx, cancel := context.WithCancel(context.Background())
			e := newEnv(t, data, db)
			var once sync.Once
			err := e.orchestrator(func(ev orchestrator.Event) {
				if ev.Type == orchestrator.EventStepCommitted && ev.Step == after {
					once.Do(cancel)
				}
			}).Start(ctx, cfg(t))
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run returned %v", err)
			}
			e.stop()
			e2 := newEnv(t, data, db)
			if err := e2.orchestrator(nil).Resume(context.Background(), "p"); err != nil {
				t.Fatal(err)
			}
			if got := sizes(e2.store); got != want {
				t.Fatalf("table sizes after a resume:\n%s\nwant (uninterrupted)\n%s", got, want)
			}
			if got := rewards(t, e2.store, "p"); got != wantRewards {
				t.Fatalf("resumed run differs from uninterrupted run:\n%s\nwant\n%s", got, wantRewards)
			}
		})
	}
}
