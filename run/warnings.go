package run

import (
	"context"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
)

// The codes of a run's warnings (orchestrator.Warning.Code), for readers
// that tell them apart.
const (
	// WarnLearningRate: at the start, the run trains the reference
	// backend at a learning rate its updates do not move the policy with.
	WarnLearningRate = "learning_rate"
	// WarnValidationUnchanged: at the end, no trained adapter changed
	// the outcome of a validation episode.
	WarnValidationUnchanged = "validation_unchanged"
)

// endCheckTimeout bounds reading a finished run's validations for its
// end-of-run warning.
const endCheckTimeout = 30 * time.Second

// observer is what the orchestrator sends a run's events to: each goes
// on to Options.Events, and the run's warnings are logged and sent among
// them, the start's right after run_started and the end's right before
// the run_finished of a run that succeeded, so that a reader that stops
// at run_finished has them.
func (r *Run) observer(ctx context.Context) func(orchestrator.Event) {
	return func(e orchestrator.Event) {
		if e.RunFinished != nil && e.RunFinished.State == checkpoint.StateSucceeded {
			if w, ok := r.endWarning(ctx); ok {
				r.warn(e.Step, w)
			}
		}
		if r.opts.Events != nil {
			r.opts.Events(e)
		}
		if e.RunStarted != nil {
			for _, w := range startWarnings(r.cfg) {
				r.warn(e.Step, w)
			}
		}
	}
}

// warn logs w and sends it as a warning event of step.
func (r *Run) warn(step int, w orchestrator.Warning) {
	r.opts.Logger.Warn(w.Message, "run", r.Name(), "warning", w.Code)
	if r.opts.Events != nil {
		r.opts.Events(orchestrator.Event{Type: orchestrator.EventWarning, Run: r.Name(), Step: step, Time: time.Now(), Warning: &w})
	}
}

// endWarning reads the run's validations and returns its end-of-run
// warning, if it has one (unchangedWarning). The read is not cut short by
// ctx: the run has ended, and its end is recorded.
func (r *Run) endWarning(ctx context.Context) (orchestrator.Warning, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endCheckTimeout)
	defer cancel()
	_, _, evals, err := r.opts.Store.Snapshot(ctx, r.Name())
	if err != nil {
		r.opts.Logger.Warn("read the run's validations to check that training changed them", "run", r.Name(), "err", err)
		return orchestrator.Warning{}, false
	}
	return unchangedWarning(evals)
}

// startWarnings are the warnings of a run of cfg as it starts playing:
// the settings under which training cannot move the policy, so that
// validation would stay flat without a word.
func startWarnings(cfg config.Config) []orchestrator.Warning {
	lr := cfg.Trainer.Hyperparameters.LearningRate
	low, high := refmodel.DefaultLearningRate/100, refmodel.DefaultLearningRate*100
	if lr >= low && lr <= high {
		return nil
	}
	var msg string
	switch {
	case cfg.Embedded():
		msg = fmt.Sprintf("trainer.hyperparameters.learning_rate %g is far from what the embedded backend learns with (default %g; useful range %g to %g): its updates will not move the policy and validation will stay flat; leave the key unset on the embedded backend (docs/CONFIG.md)",
			lr, refmodel.DefaultLearningRate, low, high)
	case servesRefmodel(cfg):
		msg = fmt.Sprintf("trainer.hyperparameters.learning_rate %g is far from what the reference backend learns with (its model %s is what 'grpo refmodel serve' serves; it learns with %g, useful range %g to %g): its updates will not move the policy and validation will stay flat; set trainer.hyperparameters.learning_rate: %g (docs/CONFIG.md)",
			lr, refmodel.BaseModelName, refmodel.DefaultLearningRate, low, high, refmodel.DefaultLearningRate)
	default:
		return nil
	}
	return []orchestrator.Warning{{Code: WarnLearningRate, Message: msg}}
}

// servesRefmodel reports whether cfg's endpoints or trainer are the reference
// backend served on its own ('grpo refmodel serve'): the only model it
// serves and trains is refmodel.BaseModelName, so a run against it names
// that model.
func servesRefmodel(cfg config.Config) bool {
	return cfg.Trainer.Kind == config.TrainerJobs &&
		(cfg.Inference.Model == refmodel.BaseModelName || cfg.Trainer.BaseModel == refmodel.BaseModelName)
}

// unchangedWarning is the warning for a run whose trained adapters never
// changed a validation episode's outcome; ok is false otherwise. The rule:
// step 0 (the base model) and at least one later step were validated, and
// at every later validated step each episode on a table (n, seed) the base
// also played ended as the base's did (reward, meals, deadlock, invalid
// outputs; errored episodes left out). Validation tables are the same at
// every step and a policy that did not move plays them the same way, so
// the run learned nothing that shows.
func unchangedWarning(evals []checkpoint.Evaluation) (w orchestrator.Warning, ok bool) {
	type table struct {
		n    int
		seed int64
	}
	base := map[table]checkpoint.EpisodeRecord{}
	for _, ev := range evals {
		if ev.Step == 0 {
			for _, e := range ev.Records {
				if !e.Errored {
					base[table{e.N, e.Seed}] = e
				}
			}
		}
	}
	if len(base) == 0 {
		return w, false
	}
	later := 0
	for _, ev := range evals {
		if ev.Step == 0 {
			continue
		}
		shared := 0
		for _, e := range ev.Records {
			b, ok := base[table{e.N, e.Seed}]
			if !ok || e.Errored {
				continue
			}
			if e.Reward != b.Reward || e.Meals != b.Meals || e.Deadlock != b.Deadlock || e.Invalid != b.Invalid {
				return w, false
			}
			shared++
		}
		if shared > 0 {
			later++
		}
	}
	if later == 0 {
		return w, false
	}
	steps := "1 step"
	if later != 1 {
		steps = fmt.Sprintf("%d steps", later)
	}
	return orchestrator.Warning{Code: WarnValidationUnchanged, Message: fmt.Sprintf("no trained adapter changed a validation episode: at each of the %s validated after step 0, every table ended exactly as the base model's did at step 0 (same reward, meals, deadlock and invalid outputs), so training did not move the policy where it shows; check trainer.hyperparameters.learning_rate against what the trainer learns with, and that the trained adapters are the ones served",
		steps)}, true
}
