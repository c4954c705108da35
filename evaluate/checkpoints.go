package evaluate

import (
	"context"
	"fmt"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
)

// Adapters loads the checkpoints' adapters into the endpoints that serve
// an evaluation (run.Peers).
type Adapters interface {
	LoadEverywhere(ctx context.Context, name, path string) error
	UnloadEverywhere(ctx context.Context, name string) error
	// Served is the model names the endpoints serve now.
	Served(ctx context.Context) map[string]bool
}

// Checkpoint is one checkpoint of a run: its step and the adapter trained
// by then (nil: the base model).
type Checkpoint struct {
	Step    int
	Adapter *checkpoint.Adapter
}

// Checkpoints are checkpoints of one run to measure on its test split.
type Checkpoints struct {
	// Config is the run's, as stored: its name, test split settings and
	// base model (inference.model).
	Config      config.Config
	Checkpoints []Checkpoint
	N           []int // table sizes
	Episodes    int   // tables per size
	// Keep, when set, is given each step's result as soon as it is
	// measured, so that an interrupted evaluation keeps what it finished.
	Keep func(step int, res Result) error
}

// RunCheckpoints plays the test split (TestSet) of c.Config with each
// checkpoint of c, each step once, on o.Client, and returns each step's
// result. Each adapter is loaded through a under its own name; those the
// endpoints did not serve before are unloaded after, so the endpoints are
// left as they were (the run's last adapters, one promoted for serving,
// stay). It returns the context's cause when ctx ends.
func RunCheckpoints(ctx context.Context, o Options, a Adapters, c Checkpoints) (map[int]Result, error) {
	name := c.Config.Run.Name
	served := a.Served(ctx)
	loaded := map[string]bool{}
	defer func() {
		for model := range loaded {
			if !served[model] {
				// Failure only costs the endpoint memory.
				a.UnloadEverywhere(context.WithoutCancel(ctx), model)
			}
		}
	}()
	done := map[int]Result{}
	for _, cp := range c.Checkpoints {
		if _, ok := done[cp.Step]; ok {
			continue // best may be last
		}
		model := c.Config.Inference.Model
		if cp.Adapter != nil {
			model = cp.Adapter.Name
			if !loaded[model] {
				if err := a.LoadEverywhere(ctx, model, cp.Adapter.Path); err != nil {
					return nil, fmt.Errorf("run %s step %d: load adapter %s from %s: %w", name, cp.Step, model, cp.Adapter.Path, err)
				}
				loaded[model] = true
			}
		}
		res, err := Run(ctx, o, TestSet(c.Config, model, c.N, c.Episodes))
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("run %s step %d: %w", name, cp.Step, err)
		}
		done[cp.Step] = res
		if c.Keep != nil {
			if err := c.Keep(cp.Step, res); err != nil {
				return nil, err
			}
		}
	}
	return done, nil
}
