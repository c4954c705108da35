package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

func asyncConfig(t *testing.T, name string, steps, k int) config.Config {
	t.Helper()
	cfg := smallConfig(t, name, steps)
	cfg.GRPO.MaxOffPolicySteps = k
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// gatedTrainer is the real job client with a hook before each wait and a
// record of the jobs submitted.
type gatedTrainer struct {
	orchestrator.Trainer
	beforeWait func(id string)
	mu         sync.Mutex
	reqs       []trainer.JobRequest
	active     int // jobs submitted and not yet waited for to the end
	overlap    bool
}

func (g *gatedTrainer) Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.active++
	if g.active > 1 {
		g.overlap = true
	}
	g.mu.Unlock()
	return g.Trainer.Submit(ctx, req)
}

func (g *gatedTrainer) Wait(ctx context.Context, id string, timeout time.Duration, on func(trainer.Job)) (trainer.Job, error) {
	if g.beforeWait != nil {
		g.beforeWait(id)
	}
	j, err := g.Trainer.Wait(ctx, id, timeout, on)
	g.mu.Lock()
	g.active--
	g.mu.Unlock()
	return j, err
}

// TestAsyncPipelineSamplesWhileTraining runs k=1: step 2's rollouts must
// all finish while step 1's job is held, each step samples with the model
// current after step max(0, s-2), and that is what its trajectories, its
// stored record and its job say.
func TestAsyncPipelineSamplesWhileTraining(t *testing.T) {
	const steps = 4
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	var mu sync.Mutex
	step2 := 0 // step 2's training episodes finished
	var order []string
	events := func(ev orchestrator.Event) {
		mu.Lock()
		defer mu.Unlock()
		if f := ev.EpisodeFinished; f != nil && f.Split == "train" && ev.Step == 2 {
			step2++
		}
		if ev.Type != orchestrator.EventEpisodeFinished && ev.Type != orchestrator.EventJobState {
			order = append(order, fmt.Sprintf("%s %d", ev.Type, ev.Step))
		}
	}
	g := &gatedTrainer{Trainer: e.trainer}
	g.beforeWait = func(id string) {
		if id != trainer.JobID("async", 1) {
			return
		}
		// Hold step 1's job until step 2's rollouts are done: they must
		// not wait for it.
		var n int
		finished := testutil.Eventually(func() bool {
			mu.Lock()
			defer mu.Unlock()
			n = step2
			return n == 6
		})
		if !finished {
			t.Errorf("step 2's rollouts did not finish within %s while step 1 trained (%d of 6 episodes)", testutil.Patience, n)
		}
	}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: g, Adapters: e.fleet, Events: events})
	if err := o.Start(context.Background(), asyncConfig(t, "async", steps, 1)); err != nil {
		t.Fatal(err)
	}
	if g.overlap {
		t.Error("two trainer jobs were in flight at once")
	}
	_, stored, _ := snapshot(t, e.store, "async")
	if len(stored) != steps+1 {
		t.Fatalf("%d steps stored, want %d", len(stored), steps+1)
	}
	// The model each step samples with, and the adapter it trains from.
	adapterAfter := map[int]string{0: ""}
	for _, st := range stored[1:] {
		adapterAfter[st.Step] = ""
		if st.Adapter != nil {
			adapterAfter[st.Step] = st.Adapter.Name
		}
	}
	byStep := map[int]trainer.JobRequest{}
	for i, req := range g.reqs {
		s, err := jobStep(req.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && s <= prevStep(g.reqs[i-1].ID) {
			t.Errorf("job %s submitted after %s", req.ID, g.reqs[i-1].ID)
		}
		byStep[s] = req
	}
	for _, st := range stored[1:] {
		s := st.Step
		wantPolicy := max(0, s-2)
		if p, l := st.Train.PolicyStep, st.Train.OffPolicyLag; p == nil || l == nil || *p != wantPolicy || *l != s-1-wantPolicy || st.Train.StaleDropped != 0 {
			t.Errorf("step %d: policy step %v, lag %v, dropped %d; want %d, %d, 0", s, p, l, st.Train.StaleDropped, wantPolicy, s-1-wantPolicy)
		}
		req, ok := byStep[s]
		if !ok {
			continue // no signal: no job
		}
		wantModel := adapterAfter[wantPolicy]
		if wantModel == "" {
			wantModel = refmodel.BaseModelName
		}
		for _, tr := range req.Trajectories {
			if tr.PolicyStep == nil || *tr.PolicyStep != wantPolicy || tr.Sampling == nil || tr.Sampling.Model != wantModel {
				t.Fatalf("step %d trajectory policy_step %v sampling %+v; want %d and model %s", s, tr.PolicyStep, tr.Sampling, wantPolicy, wantModel)
			}
		}
		parent := ""
		if req.ParentAdapter != nil {
			parent = req.ParentAdapter.Name
		}
		if parent != adapterAfter[s-1] {
			t.Errorf("step %d trains from %q, want the adapter after step %d, %q", s, parent, s-1, adapterAfter[s-1])
		}
	}
	if len(byStep) == 0 {
		t.Fatal("no step trained: the test shows nothing")
	}
	// Steps are committed in order.
	last := -1
	for _, o := range order {
		var s int
		if _, err := fmt.Sscanf(o, orchestrator.EventStepCommitted+" %d", &s); err == nil {
			if s != last+1 {
				t.Fatalf("step %d committed after step %d: %v", s, last, order)
			}
			last = s
		}
	}
}

func prevStep(id string) int {
	s, _ := jobStep(id)
	return s
}

// jobStep reads the step of a job id "<run>[.<run id>]/step-NNNN".
func jobStep(id string) (int, error) {
	var s int
	i := strings.LastIndex(id, "/step-")
	if i < 0 || !strings.HasPrefix(id, "async") {
		return 0, fmt.Errorf("job id %q: want async[.<run id>]/step-NNNN", id)
	}
	if _, err := fmt.Sscanf(id[i:], "/step-%d", &s); err != nil {
		return 0, fmt.Errorf("job id %q: %w", id, err)
	}
	return s, nil
}

// TestAsyncRunIsDeterministicAndResumes: with k=1, stopping a run at
// various moments and resuming it gives exactly the uninterrupted run's
// results (each step samples with the model of step max(0, s-2) whatever
// happened), with every step stored once.
func TestAsyncRunIsDeterministicAndResumes(t *testing.T) {
	const steps = 4
	dir := t.TempDir()
	ref := newEnv(t, filepath.Join(dir, "ref-data"), filepath.Join(dir, "ref.db"))
	if err := ref.orchestrator(nil).Start(context.Background(), asyncConfig(t, "r", steps, 1)); err != nil {
		t.Fatal(err)
	}
	want := rewards(t, ref.store, "r")
	sync0 := newEnv(t, filepath.Join(dir, "sync-data"), filepath.Join(dir, "sync.db"))
	if err := sync0.orchestrator(nil).Start(context.Background(), asyncConfig(t, "r", steps, 0)); err != nil {
		t.Fatal(err)
	}
	if rewards(t, sync0.store, "r") == want {
		t.Fatal("k=1 gave the k=0 results: its rollouts did not use older models")
	}
	_, syncSteps, _ := snapshot(t, sync0.store, "r")
	for _, st := range syncSteps[1:] {
		if p, l := st.Train.PolicyStep, st.Train.OffPolicyLag; p == nil || l == nil || *p != st.Step-1 || *l != 0 {
			t.Errorf("synchronous step %d: policy step %v, lag %v; want %d, 0", st.Step, p, l, st.Step-1)
		}
	}
	for _, stop := range []struct {
		name  string
		event string
		step  int
	}{
		{"step 3 sampled ahead, step 2 training", orchestrator.EventJobState, 2},
		{"adapter 2 loaded, not committed", orchestrator.EventAdapterLoaded, 2},
		{"just committed", orchestrator.EventStepCommitted, 2},
		{"step 3 episodes", orchestrator.EventEpisodeFinished, 3},
		// Step 2 validates while step 3 trains: neither is committed,
		// and the store holds step 3's job under step 2's.
		{"step 3 training while step 2 validates", orchestrator.EventJobState, 3},
		{"step 2 validated, not committed", orchestrator.EventValidationDone, 2},
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
			}).Start(ctx, asyncConfig(t, "r", steps, 1))
			if err == nil || !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run returned %v", err)
			}
			if run, _, _ := snapshot(t, e.store, "r"); run.State != checkpoint.StateCancelled {
				t.Fatalf("state after interruption %s", run.State)
			}
			if stop.event == orchestrator.EventJobState && stop.step == 3 {
				inf, err := e.store.GetInFlight(context.Background(), "r")
				if err != nil {
					t.Fatal(err)
				}
				if inf.For(2) == nil || inf.For(3) == nil {
					t.Fatalf("in-flight record %+v, want step 2's job with step 3's", inf)
				}
			}
			e.stop()
			e2 := newEnv(t, data, db)
			var mu sync.Mutex
			resampled := map[int]int{} // training episodes played again, by step
			if err := e2.orchestrator(func(ev orchestrator.Event) {
				if f := ev.EpisodeFinished; f != nil && f.Split == "train" {
					mu.Lock()
					resampled[ev.Step]++
					mu.Unlock()
				}
			}).Resume(context.Background(), "r"); err != nil {
				t.Fatal(err)
			}
			if stop.event == orchestrator.EventJobState && stop.step == 3 && (resampled[2] != 0 || resampled[3] != 0) {
				t.Errorf("resumed run sampled steps 2 and 3 again (%d, %d episodes): their jobs were submitted, it must reattach to them", resampled[2], resampled[3])
			}
			if got := rewards(t, e2.store, "r"); got != want {
				t.Fatalf("resumed run differs from uninterrupted run:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// gatedCompleter holds validation requests (told apart by their
// temperature) while armed, until released or a deadline passes.
type gatedCompleter struct {
	rollout.Completer
	temperature float32
	mu          sync.Mutex
	gate        chan struct{} // non-nil while armed; closed to release
	timedOut    bool
}

func (g *gatedCompleter) arm() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gatedCompleter) release() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (g *gatedCompleter) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil && req.Temperature == g.temperature {
		select {
		case <-gate:
		case <-time.After(20 * time.Second):
			g.mu.Lock()
			g.timedOut = true
			g.mu.Unlock()
			g.release()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Completer.Complete(ctx, req)
}

// TestAsyncValidationOverlapsTraining: with k=1, step 1's validation is
// played while step 2's job trains (it is held until that job is
// submitted), and step 1 still commits with its validation, before step
// 2, with the same results as a run whose validations are not held.
func TestAsyncValidationOverlapsTraining(t *testing.T) {
	const steps = 3
	dir := t.TempDir()
	ref := newEnv(t, filepath.Join(dir, "ref-data"), filepath.Join(dir, "ref.db"))
	cfg := asyncConfig(t, "async", steps, 1)
	cfg.Validation.Temperature = 0.75
	if err := ref.orchestrator(nil).Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := rewards(t, ref.store, "async")

	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	gc := &gatedCompleter{Completer: e.chat, temperature: 0.75}
	gt := &gatedTrainer{Trainer: e.trainer}
	var mu sync.Mutex
	var order []string
	events := func(ev orchestrator.Event) {
		if ev.Type == orchestrator.EventAdapterLoaded && ev.Step == 1 {
			gc.arm() // step 1's validation waits from here on...
		}
		if ev.Type == orchestrator.EventStepCommitted || ev.Type == orchestrator.EventValidationDone {
			mu.Lock()
			order = append(order, fmt.Sprintf("%s %d", ev.Type, ev.Step))
			mu.Unlock()
		}
	}
	var submitted2 bool
	gt.beforeWait = func(id string) {
		if strings.HasSuffix(id, "/step-0002") {
			mu.Lock()
			submitted2 = true
			mu.Unlock()
			gc.release() // ...until step 2's job is submitted
		}
	}
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: gc, Trainer: gt, Adapters: e.fleet, Events: events})
	if err := o.Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if !submitted2 {
		t.Fatal("step 2 trained nothing: the test shows nothing")
	}
	if gc.timedOut {
		t.Fatal("step 1's validation waited for step 2's job to be submitted, and it never was: validation does not overlap training")
	}
	if gt.overlap {
		t.Error("two trainer jobs were in flight at once")
	}
	wantOrder := "validation_done 0,step_committed 0,validation_done 1,step_committed 1,validation_done 2,step_committed 2,validation_done 3,step_committed 3"
	if got := strings.Join(order, ","); got != wantOrder {
		t.Errorf("events %s\nwant %s", got, wantOrder)
	}
	if got := rewards(t, e.store, "async"); got != want {
		t.Fatalf("held validation changed the results:\n%s\nwant\n%s", got, want)
	}
	// The last step validates before the run ends (nothing to overlap).
	_, stored, evals := snapshot(t, e.store, "async")
	if len(stored) != steps+1 || len(evals) != steps+1 {
		t.Fatalf("%d steps and %d evaluations stored, want %d each", len(stored), len(evals), steps+1)
	}
}
