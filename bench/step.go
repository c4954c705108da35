package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/run"
)

// stepRow times training runs through the real run path (run.Open, the
// job API client, the chat client) against a fake inference server whose
// service time makes a step's rollouts last about 1.5 s (5 rounds of
// 300 ms) and a fake trainer whose jobs take TrainTime, with
// max_off_policy_steps 0 and 1, twice: validated only at the end, and
// validated every step (the default: 24 episodes, 4 times the step's
// training episodes). The step time is taken between the commits of step
// 1 and of the last step but one, so neither the pipeline's start nor
// the final validation counts.
func stepRow(ctx context.Context, o Options) ([]Result, error) {
	service := 300 * time.Millisecond
	if o.Quick {
		service = 5 * time.Millisecond
	}
	steps := max(o.Steps, 3) + 1
	llm, stopLLM, err := startLocal(ctx, LLMHandler(service))
	if err != nil {
		return nil, err
	}
	defer stopLLM()
	tr, stopTr, err := startLocal(ctx, TrainerHandler(o.TrainTime))
	if err != nil {
		return nil, err
	}
	defer stopTr()
	dir, err := os.MkdirTemp("", "grpo-bench-step-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	var out []Result
	for _, c := range []struct{ name, validation string }{
		{"validated at the end", fmt.Sprintf("{every: %d, episodes: 2}", steps)},
		{"validated every step", "{every: 1}"},
	} {
		per := map[int]float64{}
		var rollout, validate float64
		for _, k := range []int{0, 1} {
			name := fmt.Sprintf("bench-%d-k%d", len(out), k)
			cfg, err := config.Parse([]byte(fmt.Sprintf(`
run: {name: %s, steps: %d}
grpo: {max_off_policy_steps: %d}
inference: {endpoints: [{url: %q}], model: m}
trainer: {kind: jobs, url: %q, base_model: m}
validation: %s
`, name, steps, k, llm+"/v1", tr, c.validation)))
			if err != nil {
				return nil, fmt.Errorf("bench config: %w", err)
			}
			store := checkpoint.New(filepath.Join(dir, name+".db"), checkpoint.Options{})
			r, err := run.Open(ctx, cfg, run.Options{Store: store})
			if err != nil {
				return nil, err
			}
			err = r.Play(ctx)
			r.Close()
			if err != nil {
				return nil, err
			}
			_, st, _, err := store.Snapshot(ctx, cfg.Run.Name)
			if err != nil {
				return nil, err
			}
			if len(st) != steps+1 {
				return nil, fmt.Errorf("k=%d: %d steps stored, want %d", k, len(st), steps+1)
			}
			for _, s := range st[1:] {
				if s.Job == nil {
					return nil, fmt.Errorf("k=%d: step %d trained nothing (no group carried signal), so its time means nothing", k, s.Step)
				}
			}
			span := st[steps-1].Committed.Sub(st[1].Committed)
			per[k] = span.Seconds() / float64(steps-2)
			if k == 0 {
				for _, s := range st[2:steps] {
					rollout += s.Seconds["rollout"] / float64(steps-2)
					validate += s.Seconds["validate"] / float64(steps-2)
				}
			}
		}
		train := o.TrainTime.Seconds()
		desc := fmt.Sprintf("%s: rollout %.2fs, trainer %.2fs, %d steps", c.name, rollout, train, steps)
		if validate > 0 {
			desc = fmt.Sprintf("%s: rollout %.2fs, validation %.2fs, trainer %.2fs, %d steps", c.name, rollout, validate, train, steps)
		}
		out = append(out,
			Result{"step", desc, "sync step (k=0)", per[0], "s"},
			Result{"step", desc, "async step (k=1)", per[1], "s"},
			Result{"step", desc, "async/sync", per[1] / per[0], ""},
			Result{"step", desc, "async/max(rollout,train)", per[1] / max(rollout, train), ""},
			Result{"step", desc, "sync/(rollout+train)", per[0] / (rollout + train), ""},
		)
	}
	return out, nil
}
