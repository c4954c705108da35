package orchestrator_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/rollout"
)

// flatCompleter sends every training request (temperature 1) addressed to
// a model whose name ends with suffix with one fixed sampling seed, so
// that a group's episodes are all alike: the step sampled with that model
// has no signal.
type flatCompleter struct {
	rollout.Completer
	suffix string
}

func (f flatCompleter) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	if req.Temperature == 1 && strings.HasSuffix(req.Model, f.suffix) {
		r := *req
		seed := 7
		r.Seed = &seed
		req = &r
	}
	return f.Completer.Complete(ctx, req)
}

// TestAsyncResumeAfterStepWithoutSignal: with k=1, step 3 has no signal
// (no job) and validates while step 4 trains; a run stopped then holds
// step 4's job alone, under no record of step 3. The resumed run samples
// step 3 again and reattaches to step 4's job: step 4's rollouts are not
// sampled again (they were played, and would keep the model they were
// sampled with from being unloaded for the rest of the run).
func TestAsyncResumeAfterStepWithoutSignal(t *testing.T) {
	const steps = 5
	dir := t.TempDir()
	cfg := asyncConfig(t, "async", steps, 1)
	cfg.Validation.Temperature = 0.75
	flat := func(e *env) rollout.Completer { return flatCompleter{Completer: e.chat, suffix: "-step-0001"} }

	ref := newEnv(t, filepath.Join(dir, "ref-data"), filepath.Join(dir, "ref.db"))
	if err := orchestrator.New(orchestrator.Options{Store: ref.store, Completer: flat(ref), Trainer: ref.trainer, Adapters: ref.fleet}).Start(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	_, stored, _ := snapshot(t, ref.store, "async")
	if stored[3].Job != nil || stored[4].Job == nil {
		t.Fatalf("step 3 job %v, step 4 job %v: want none and one; the test shows nothing", stored[3].Job, stored[4].Job)
	}
	want := rewards(t, ref.store, "async")

	data, db := filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db")
	e := newEnv(t, data, db)
	gc := &gatedCompleter{Completer: flat(e), temperature: 0.75}
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	err := orchestrator.New(orchestrator.Options{Store: e.store, Completer: gc, Trainer: e.trainer, Adapters: e.fleet, Events: func(ev orchestrator.Event) {
		switch {
		case ev.Type == orchestrator.EventStepCommitted && ev.Step == 2:
			gc.arm() // step 3's validation waits...
		case ev.Type == orchestrator.EventJobState && ev.Step == 4:
			once.Do(cancel) // ...while step 4 trains: stop there
		}
	}}).Start(ctx, cfg)
	gc.release()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v", err)
	}
	inf, err := e.store.GetInFlight(context.Background(), "async")
	if err != nil {
		t.Fatal(err)
	}
	if last, _, _ := e.store.LastStep(context.Background(), "async"); last != 2 || inf.For(3) != nil || inf.For(4) == nil {
		t.Fatalf("last step %d, in-flight record %+v: want step 2 and step 4's job alone", last, inf)
	}
	e.stop()

	e2 := newEnv(t, data, db)
	var mu sync.Mutex
	sampled := map[int]int{} // training episodes played, by step
	if err := orchestrator.New(orchestrator.Options{Store: e2.store, Completer: flat(e2), Trainer: e2.trainer, Adapters: e2.fleet, Events: func(ev orchestrator.Event) {
		if f := ev.EpisodeFinished; f != nil && f.Split == "train" {
			mu.Lock()
			sampled[ev.Step]++
			mu.Unlock()
		}
	}}).Resume(context.Background(), "async"); err != nil {
		t.Fatal(err)
	}
	if got := rewards(t, e2.store, "async"); got != want {
		t.Fatalf("resumed run differs from uninterrupted run:\n%s\nwant\n%s", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if sampled[3] == 0 {
		t.Fatal("step 3 was not sampled again")
	}
	if sampled[4] != 0 {
		t.Errorf("resumed run sampled step 4 again (%d training episodes): its job was submitted, it must only reattach to it", sampled[4])
	}
}
