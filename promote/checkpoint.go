// Package promote puts a run's chosen checkpoint to use once the run has
// picked it: Resolve finds a stored step (the selected one, the last, the
// base model or a numbered step), Export copies its adapter directory
// with a grpo-checkpoint.json manifest, and Promote loads it into
// inference endpoints under one stable name so downstream clients always
// call the same model.
package promote

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
)

// How a step was picked; the values are printed in manifests and JSON.
const (
	ByBest = "best" // the run's selection policy chose it
	ByLast = "last" // the last committed step
	ByBase = "base" // step 0, the base model
	ByStep = "step" // named by number
)

// Pick says which stored step to use.
type Pick struct {
	By   string // ByBest, ByLast, ByBase or ByStep
	Step int    // with ByStep
}

// ParsePick accepts best, last, base or a step number (the --step flag).
func ParsePick(s string) (Pick, error) {
	switch s {
	case "", ByBest:
		return Pick{By: ByBest}, nil
	case ByLast:
		return Pick{By: ByLast}, nil
	case ByBase:
		return Pick{By: ByBase}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return Pick{}, fmt.Errorf("step %q: accepted: best, last, base or a step number >= 0", s)
	}
	return Pick{By: ByStep, Step: n}, nil
}

// Checkpoint is one stored step of a run, ready to export or promote.
type Checkpoint struct {
	Run        checkpoint.Run
	Config     config.Config
	SelectedBy string // ByBest, ByLast, ByBase or ByStep
	Step       checkpoint.Step
	// Selection is the run's selection under its own policy; nil when it
	// has nothing to choose from yet.
	Selection *checkpoint.Selection
	// Validation is the step's validation, nil when it was not evaluated.
	Validation *checkpoint.Evaluation
	// Test is the step's measurement on the run's test split (stored by
	// `grpo eval --run` or the end-of-run summary), nil when it has none.
	Test *checkpoint.TestEvaluation
	// Store is the file the checkpoint was read from: an export never
	// replaces a directory holding it.
	Store string
	// Steps are every committed step of the run: an export never
	// replaces, nor writes into, a directory holding one's adapter, or
	// the run's data directory (Run.DataDir).
	Steps []checkpoint.Step
}

// Adapter is the step's adapter, nil for the base model.
func (c Checkpoint) Adapter() *checkpoint.Adapter { return c.Step.Adapter }

// ErrNoAdapter is returned when a step has no adapter: the base model, or
// an early step where no update had signal yet.
var ErrNoAdapter = errors.New("no adapter")

// Resolve reads run from the store and finds the step pick names.
func Resolve(ctx context.Context, store *checkpoint.Store, run string, pick Pick) (Checkpoint, error) {
	rec, steps, evals, err := store.Snapshot(ctx, run)
	if err != nil {
		return Checkpoint{}, err
	}
	cfg, err := config.FromJSON(rec.Config)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("stored config of run %s: %w", run, err)
	}
	cp := Checkpoint{Run: rec, Config: cfg, SelectedBy: pick.By, Store: store.Path(), Steps: steps}
	if sel, err := checkpoint.Select(rec.Policy, rec.Metric, rec.EMA, steps, evals); err == nil {
		cp.Selection = &sel
	}
	if len(steps) == 0 {
		return Checkpoint{}, fmt.Errorf("run %s has no committed step yet", run)
	}
	want := -1
	switch pick.By {
	case ByBest:
		if cp.Selection == nil {
			return Checkpoint{}, fmt.Errorf("run %s has no selectable step yet under %s (try --step last)", run, rec.Policy)
		}
		want = cp.Selection.Step
	case ByLast:
		want = steps[len(steps)-1].Step
	case ByBase:
		want = 0
	case ByStep:
		want = pick.Step
	default:
		return Checkpoint{}, fmt.Errorf("pick %q: accepted: best, last, base, step", pick.By)
	}
	found := false
	for _, s := range steps {
		if s.Step == want {
			cp.Step, found = s, true
		}
	}
	if !found {
		return Checkpoint{}, fmt.Errorf("run %s has no committed step %d (steps 0 to %d)", run, want, steps[len(steps)-1].Step)
	}
	for _, ev := range evals {
		if ev.Step == want {
			cp.Validation = &ev
		}
	}
	tests, err := store.TestEvaluations(ctx, run, checkpoint.SplitTest)
	if err != nil {
		return Checkpoint{}, err
	}
	for _, te := range tests {
		if te.Evaluation.Step == want {
			cp.Test = &te
		}
	}
	return cp, nil
}

// OnDisk reports whether an adapter directory is present on this machine.
// A path on a remote trainer's disk reads as absent.
func OnDisk(a *checkpoint.Adapter) bool {
	if a == nil || a.Path == "" {
		return false
	}
	fi, err := os.Stat(a.Path)
	return err == nil && fi.IsDir()
}

// MarkOnDisk sets AdapterOnDisk on every step of v that has an adapter.
func MarkOnDisk(v *checkpoint.RunView) {
	for i := range v.Steps {
		if a := v.Steps[i].Adapter; a != nil {
			ok := OnDisk(a)
			v.Steps[i].AdapterOnDisk = &ok
		}
	}
}
