package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/trainer"
)

// selectionLog records, in the order the orchestrator produced them, what
// each commit chose (best_changed events, the best adapter handed to a
// CheckpointKeeper) and what checkpoint.Select chooses when recomputed
// from the store right after the commit.
type selectionLog struct {
	*trainer.JobClient
	store *checkpoint.Store
	name  string

	mu     sync.Mutex
	step   int                               // the step being committed
	want   map[int]selected                  // step -> Select on the store after its commit
	events map[int]*orchestrator.BestChanged // step -> best_changed emitted at its commit
	keeps  map[int]*trainer.Adapter          // step -> best adapter kept at its commit
	recent map[int][]trainer.Adapter         // step -> recent adapters kept at its commit
	last   map[int]*checkpoint.Adapter       // step -> its stored adapter
	err    error
}

type selected struct {
	sel checkpoint.Selection
	err error
}

func newSelectionLog(store *checkpoint.Store, name string) *selectionLog {
	return &selectionLog{store: store, name: name, want: map[int]selected{}, events: map[int]*orchestrator.BestChanged{},
		keeps: map[int]*trainer.Adapter{}, recent: map[int][]trainer.Adapter{}, last: map[int]*checkpoint.Adapter{}}
}

// event is the orchestrator's observer: it runs synchronously in the
// commit, after the store transaction and before the selection.
func (l *selectionLog) event(ev orchestrator.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ev.Type {
	case orchestrator.EventStepCommitted:
		l.step = ev.Step
		run, steps, evals, err := l.store.Curve(context.Background(), l.name)
		if err != nil {
			l.err = errors.Join(l.err, err)
			return
		}
		if last := steps[len(steps)-1]; last.Step != ev.Step {
			l.err = errors.Join(l.err, fmt.Errorf("store's last step %d at the commit of %d", last.Step, ev.Step))
		}
		l.last[ev.Step] = steps[len(steps)-1].Adapter
		sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals)
		l.want[ev.Step] = selected{sel, err}
	case orchestrator.EventBestChanged:
		l.events[ev.Step] = ev.BestChanged
	}
}

func (l *selectionLog) KeepCheckpoints(_ context.Context, best *trainer.Adapter, recent []trainer.Adapter) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keeps[l.step] = best
	l.recent[l.step] = recent
	return nil
}

func adapterName[A trainer.Adapter | checkpoint.Adapter | orchestrator.Adapter](a *A) string {
	if a == nil {
		return "base"
	}
	switch v := any(*a).(type) {
	case trainer.Adapter:
		return v.Name
	case checkpoint.Adapter:
		return v.Name
	case orchestrator.Adapter:
		return v.Name
	}
	return ""
}

// TestSelectionInMemoryMatchesTheStore checks that the selection the
// orchestrator makes on its in-memory curve after each commit is the one
// checkpoint.Select makes on the whole run read back from the store, for
// every policy, with validation every 2 steps, smoothing, and a restart in
// the middle (the curve is then read once, and appended to again).
func TestSelectionInMemoryMatchesTheStore(t *testing.T) {
	const steps, stopAt = 7, 4
	for _, c := range []struct {
		policy checkpoint.Policy
		metric checkpoint.Metric
		ema    float64
	}{
		{checkpoint.PolicyBestValidation, checkpoint.MetricRewardMean, 0.5},
		{checkpoint.PolicyBestTrain, checkpoint.MetricRewardMean, 0.5},
		{checkpoint.PolicyLast, checkpoint.MetricRewardMean, 0.5},
		{checkpoint.PolicyBestValidation, checkpoint.MetricDeadlockRate, 0},
	} {
		t.Run(fmt.Sprintf("%s/%s/ema=%v", c.policy, c.metric, c.ema), func(t *testing.T) {
			dir := t.TempDir()
			data, db := filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db")
			cfg, err := config.Parse([]byte(fmt.Sprintf(`
run: {name: sel, steps: %d, seed: 3}
validation: {episodes: 4, every: 2, selection: %s, metric: %s, ema: %v}
inference: {adapters: {keep: 1}}
`, steps, c.policy, c.metric, c.ema)), config.WithEmbedded(refDefaults))
			if err != nil {
				t.Fatal(err)
			}

			e := newEnv(t, data, db)
			l := newSelectionLog(e.store, "sel")
			l.JobClient = e.trainer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: l, Adapters: e.fleet,
				Events: func(ev orchestrator.Event) {
					if ev.Type == orchestrator.EventStepStarted && ev.Step == stopAt {
						cancel() // steps 0..stopAt-1 are committed
					}
					l.event(ev)
				}})
			if err := o.Start(ctx, cfg); !errors.Is(err, context.Canceled) {
				t.Fatalf("interrupted run: %v", err)
			}
			e.stop()
			e2 := newEnv(t, data, db)
			l.JobClient, l.store = e2.trainer, e2.store
			o2 := orchestrator.New(orchestrator.Options{Store: e2.store, Completer: e2.chat, Trainer: l, Adapters: e2.fleet, Events: l.event})
			if err := o2.Resume(context.Background(), "sel"); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			if l.err != nil {
				t.Fatal(l.err)
			}

			var prev *checkpoint.Selection
			changes := 0
			for s := 0; s <= steps; s++ {
				w, ok := l.want[s]
				if !ok {
					t.Fatalf("step %d: never committed", s)
				}
				ev := l.events[s]
				if w.err != nil {
					if !errors.Is(w.err, checkpoint.ErrNoSelection) {
						t.Fatalf("step %d: Select on the store: %v", s, w.err)
					}
					if ev != nil || l.keeps[s] != nil || prev != nil {
						t.Fatalf("step %d: the store selects nothing, the orchestrator %+v", s, ev)
					}
					continue
				}
				changed := prev == nil || prev.Step != w.sel.Step || prev.Value != w.sel.Value
				switch {
				case changed && ev == nil:
					t.Errorf("step %d: the store's selection changed to step %d (%v), no best_changed", s, w.sel.Step, w.sel.Value)
				case !changed && ev != nil:
					t.Errorf("step %d: best_changed %+v, the store's selection is unchanged (step %d, %v)", s, *ev, w.sel.Step, w.sel.Value)
				case ev != nil:
					changes++
					got := fmt.Sprintf("%s %d %v %v %d %v %s", ev.Policy, ev.Step, ev.Value, ev.Scored, ev.LastStep, ev.LastValue, adapterName(ev.Adapter))
					want := fmt.Sprintf("%s %d %v %v %d %v %s", w.sel.Policy, w.sel.Step, w.sel.Value, w.sel.Scored, w.sel.LastStep, w.sel.LastValue, adapterName(w.sel.Adapter))
					if got != want {
						t.Errorf("step %d: best_changed %s, the store selects %s", s, got, want)
					}
				}
				if got, want := adapterName(l.keeps[s]), adapterName(w.sel.Adapter); got != want {
					t.Errorf("step %d: kept best adapter %s, the store selects %s", s, got, want)
				}
				// keep: 1, so the recent adapters are the last step's.
				wantRecent := "[]"
				if a := l.last[s]; a != nil {
					wantRecent = "[" + a.Name + "]"
				}
				var names []string
				for _, a := range l.recent[s] {
					names = append(names, a.Name)
				}
				if got := fmt.Sprint(names); got != wantRecent {
					t.Errorf("step %d: kept recent adapters %s, want %s", s, got, wantRecent)
				}
				sel := w.sel
				prev = &sel
			}
			if changes == 0 {
				t.Fatal("no best_changed at all: the test compares nothing")
			}
			if _, ok := l.want[stopAt-1]; !ok {
				t.Fatal("the run was not interrupted after a commit")
			}
		})
	}
}
