package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/trainer"
)

// seamTrainer is the job API client with every optional trainer seam,
// recording how the orchestrator uses them.
type seamTrainer struct {
	*trainer.JobClient
	mu        sync.Mutex
	before    map[string]string // job id -> state answered
	reattach  map[string]string // job id -> state handed back
	keeps     []kept
	validated map[int][]trainer.Trajectory
}

var (
	_ orchestrator.ResumableTrainer = (*seamTrainer)(nil)
	_ orchestrator.CheckpointKeeper = (*seamTrainer)(nil)
	_ orchestrator.ValidationLogger = (*seamTrainer)(nil)
)

func newSeamTrainer(c *trainer.JobClient) *seamTrainer {
	return &seamTrainer{JobClient: c, before: map[string]string{}, reattach: map[string]string{}, validated: map[int][]trainer.Trajectory{}}
}

func (s *seamTrainer) Before(_ context.Context, req trainer.JobRequest) (json.RawMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	state := fmt.Sprintf(`{"before":%d}`, len(s.before)+100)
	s.before[req.ID] = state
	return json.RawMessage(state), nil
}

func (s *seamTrainer) Reattach(_ context.Context, req trainer.JobRequest, state json.RawMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reattach[req.ID] = string(state)
	return nil
}

// kept is one call of KeepCheckpoints.
type kept struct {
	best   *trainer.Adapter
	recent []trainer.Adapter
}

func (s *seamTrainer) KeepCheckpoints(_ context.Context, best *trainer.Adapter, recent []trainer.Adapter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keeps = append(s.keeps, kept{best, recent})
	return errors.New("keeping fails: the run goes on")
}

func (s *seamTrainer) LogValidation(_ context.Context, step int, trajs []trainer.Trajectory) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.validated[step] = trajs
	return errors.New("logging fails: the run goes on")
}

func TestOptionalTrainerSeams(t *testing.T) {
	dir := t.TempDir()
	data, db := filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db")
	e := newEnv(t, data, db)
	st := newSeamTrainer(e.trainer)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: st, Adapters: e.fleet, Events: func(ev orchestrator.Event) {
		if ev.Type == orchestrator.EventJobState && ev.Step == 2 {
			once.Do(cancel) // stop with step 2's job in flight
		}
	}})
	cfg := smallConfig(t, "seams", 3)
	cfg.Inference.Adapters.Keep = 2
	if err := o.Start(ctx, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	inf, err := e.store.GetInFlight(context.Background(), "seams")
	if err != nil || inf == nil {
		t.Fatalf("in-flight job: %+v %v", inf, err)
	}
	rec, _, _ := snapshot(t, e.store, "seams")
	key := trainer.JobKey("seams", rec.ID) // job ids carry the run's id
	id := trainer.JobID(key, 2)
	if inf.JobID != id || string(inf.TrainerState) != st.before[id] {
		t.Fatalf("in-flight %s with trainer state %s, want %s with %s (what Before answered)", inf.JobID, inf.TrainerState, id, st.before[id])
	}
	e.stop()
	e2 := newEnv(t, data, db)
	st.JobClient = e2.trainer
	o2 := orchestrator.New(orchestrator.Options{Store: e2.store, Completer: e2.chat, Trainer: st, Adapters: e2.fleet})
	if err := o2.Resume(context.Background(), "seams"); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if len(st.reattach) != 1 || st.reattach[id] != st.before[id] {
		t.Fatalf("Reattach got %v, want only %s with %s", st.reattach, id, st.before[id])
	}
	run, steps, evals := snapshot(t, e2.store, "seams")
	if run.State != checkpoint.StateSucceeded {
		t.Fatalf("state %s: the seams' errors must not fail the run", run.State)
	}
	// Before ran once per job: steps 1 to 3 (2 only once, before the stop).
	for _, s := range steps[1:] {
		if _, ok := st.before[trainer.JobID(key, s.Step)]; (s.Job != nil) != ok {
			t.Errorf("step %d: job %v, Before called %v", s.Step, s.Job != nil, ok)
		}
	}
	// After the last commit: keep the best step's adapter and those of
	// the last `keep` (2) steps.
	sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals)
	if err != nil {
		t.Fatal(err)
	}
	k := st.keeps[len(st.keeps)-1]
	wantBest := "base"
	if sel.Adapter != nil {
		wantBest = sel.Adapter.Name
	}
	gotBest := "base"
	if k.best != nil {
		gotBest = k.best.Name
	}
	var got []string
	for _, a := range k.recent {
		got = append(got, a.Name)
	}
	// Every step of this run trains (its config resamples nothing and
	// each step has signal), so steps 2 and 3 have adapters of their own.
	want := []string{steps[2].Adapter.Name, steps[3].Adapter.Name}
	if gotBest != wantBest || !slices.Equal(got, want) {
		t.Errorf("last KeepCheckpoints(best %s, recent %v), want (%s, %v)", gotBest, got, wantBest, want)
	}
	// Every validation handed over: 8 episodes x 5 philosophers, one group
	// per table size, the episode's reward, no advantage.
	for _, ev := range evals {
		trajs := st.validated[ev.Step]
		if len(trajs) != (ev.Episodes-ev.Errored)*5 {
			t.Fatalf("step %d: %d validation trajectories, want %d", ev.Step, len(trajs), (ev.Episodes-ev.Errored)*5)
		}
		for i, tr := range trajs {
			if tr.Group != fmt.Sprintf("v%d-n5", ev.Step) || tr.Advantage != 0 || tr.Reward != ev.Rewards[i/5] || len(tr.MessagesAndChoices) == 0 {
				t.Fatalf("step %d trajectory %d: group %s reward %v advantage %v, want v%d-n5, %v, 0", ev.Step, i, tr.Group, tr.Reward, tr.Advantage, ev.Step, ev.Rewards[i/5])
			}
		}
	}
}

// renamingTrainer answers every job with an adapter named otherwise than
// the job's output_adapter.
type renamingTrainer struct{ *trainer.JobClient }

func (r renamingTrainer) Wait(ctx context.Context, id string, timeout time.Duration, on func(trainer.Job)) (trainer.Job, error) {
	j, err := r.JobClient.Wait(ctx, id, timeout, on)
	if j.Adapter != nil {
		a := *j.Adapter
		a.Name = "someone-elses-adapter"
		j.Adapter = &a
	}
	return j, err
}

// TestTrainerMustNameAdapterAsAsked: a job API trainer whose job succeeds
// with an adapter of another name than the output_adapter asked stops the
// run at that step, naming both, and nothing is loaded under that name.
func TestTrainerMustNameAdapterAsAsked(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: renamingTrainer{e.trainer}, Adapters: e.fleet})
	err := o.Start(context.Background(), smallConfig(t, "renamed", 2))
	if err == nil || !strings.Contains(err.Error(), `succeeded with adapter "someone-elses-adapter", not the output_adapter "renamed.`) {
		t.Fatalf("run with a renaming trainer: %v", err)
	}
	run, steps, _ := snapshot(t, e.store, "renamed")
	if run.State != checkpoint.StateFailed || len(steps) != 1 {
		t.Fatalf("run %s with %d steps; want failed with step 0 only", run.State, len(steps))
	}
}

// forgetfulTrainer's first wait for step 1's job finds the trainer no
// longer knows it (404), as after a restart that kept no jobs; it counts
// the submissions of each job.
type forgetfulTrainer struct {
	*trainer.JobClient
	mu      sync.Mutex
	forgot  bool
	always  bool // every wait finds the job lost
	submits map[string]int
}

func (f *forgetfulTrainer) Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error) {
	f.mu.Lock()
	f.submits[req.ID]++
	f.mu.Unlock()
	return f.JobClient.Submit(ctx, req)
}

func (f *forgetfulTrainer) Wait(ctx context.Context, id string, timeout time.Duration, on func(trainer.Job)) (trainer.Job, error) {
	f.mu.Lock()
	lose := f.always || !f.forgot && strings.HasSuffix(id, "/step-0001")
	f.forgot = f.forgot || lose
	f.mu.Unlock()
	if lose {
		return trainer.Job{}, fmt.Errorf("wait for trainer job %s: 404 Not Found: %w", id, trainer.ErrJobNotFound)
	}
	return f.JobClient.Wait(ctx, id, timeout, on)
}

// TestLostJobIsSubmittedAgain: a job the trainer no longer knows while
// the run waits for it is submitted again, once; a trainer that loses it
// again fails the run saying so.
func TestLostJobIsSubmittedAgain(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	ft := &forgetfulTrainer{JobClient: e.trainer, submits: map[string]int{}}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: ft, Adapters: e.fleet})
	if err := o.Start(context.Background(), smallConfig(t, "lost", 2)); err != nil {
		t.Fatalf("run whose trainer lost a job once: %v", err)
	}
	rec, steps, _ := snapshot(t, e.store, "lost")
	key := trainer.JobKey("lost", rec.ID)
	if got := ft.submits[trainer.JobID(key, 1)]; got != 2 || ft.submits[trainer.JobID(key, 2)] != 1 || len(steps) != 3 {
		t.Fatalf("submits %v, %d steps; want step 1's job twice, step 2's once, 3 steps", ft.submits, len(steps))
	}

	ft2 := &forgetfulTrainer{JobClient: e.trainer, submits: map[string]int{}, always: true}
	o2 := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: ft2, Adapters: e.fleet})
	err := o2.Start(context.Background(), smallConfig(t, "lost-always", 2))
	if !errors.Is(err, trainer.ErrJobNotFound) || !strings.Contains(err.Error(), "lost again after it was submitted again") {
		t.Fatalf("run whose trainer always loses its jobs: %v", err)
	}
}
