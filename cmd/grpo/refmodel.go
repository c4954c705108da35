package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/grpo-dev/grpo/refmodel"
)

const refmodelSynopsis = `Usage: grpo refmodel serve [--addr HOST:PORT] [--data-dir DIR] [--seed S]
                           [--base-coordination C]
                           [--strict [--enable-auto-tool-choice] [--quirks F]]

Serves the embedded reference backend on its own: a small learnable policy
behind vLLM's OpenAI-compatible API (/v1/chat/completions, /v1/models,
/v1/load_lora_adapter, /v1/unload_lora_adapter, /health, /metrics) and the
trainer job API (/v1/jobs, /healthz) on one address. Its base model is
served as "refmodel"; trained adapters are written under --data-dir.

Pointed at a finished run's data directory (grpo run keeps it next to the
store as <db>.data; the daemon as <db>.data/<run>), it serves that run's
adapters after the run ended: each step's adapter is loaded at start under
the name the run gave it (e.g. dp5-shaped-1.5f3a9c0e7b21d448-step-0003:
the run's name, its random id, the step), and any adapter
directory can be loaded by path with POST /v1/load_lora_adapter, which is
what 'grpo promote RUN --endpoint http://HOST:PORT/v1' does.

--base-coordination sets the base policy's strength, as the config's
trainer.base_coordination does for a run: -1 to 1, 0 (the default) the
default base, below 0 a poorer coordinator, above 0 a better one. The
served base and the trainer's W0 both use it. An adapter records the base
it was trained on and is refused by a server with another one, so serve a
run's data directory with its run's trainer.base_coordination.

--strict behaves like vLLM where grpo could go wrong: tool_choice "auto"
is refused with vLLM's 400 unless --enable-auto-tool-choice is given too;
load_inplace is ignored (a second load of a name answers 400 "has already
been loaded", as vLLM before the option); temperatures between 0 and 0.01
are raised to 0.01; and a share --quirks of tool calls (default 0.05,
seeded) come back as unparsed <tool_call> text, several tool calls, or cut
with finish_reason "length".
`

// RefmodelCommand is `grpo refmodel serve`.
type RefmodelCommand struct {
	*Main
	addr, dataDir string
	seed          int64
	baseCoord     float64
	preload       bool
	strict, auto  bool
	quirks        float64
}

// ParseFlags parses the command line of `grpo refmodel serve`.
func (c *RefmodelCommand) ParseFlags(args []string) error {
	fs := c.newFlags("refmodel", refmodelSynopsis)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8000", "listen address")
	fs.StringVar(&c.dataDir, "data-dir", "refmodel-data", "directory for adapters and job records")
	fs.Int64Var(&c.seed, "seed", 1, "seed of the server's sampler for requests without a seed")
	fs.Float64Var(&c.baseCoord, "base-coordination", 0, "the base policy's strength, -1 to 1 (trainer.base_coordination; 0: the default base)")
	fs.BoolVar(&c.preload, "preload", true, "serve the adapters already under --data-dir/adapters at start, under their names")
	fs.BoolVar(&c.strict, "strict", false, "behave like vLLM where grpo could go wrong")
	fs.BoolVar(&c.auto, "enable-auto-tool-choice", false, "with --strict: accept tool_choice \"auto\", as vLLM started with --enable-auto-tool-choice --tool-call-parser hermes")
	fs.Float64Var(&c.quirks, "quirks", 0.05, "with --strict: share of tool calls answered as vLLM's parser sometimes does, 0 to 1")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 || fs.Arg(0) != "serve" {
		return usagef("want 'grpo refmodel serve'")
	}
	if err := parse(fs, fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if !(c.quirks >= 0 && c.quirks <= 1) {
		return usagef("--quirks %v: accepted 0 to 1", c.quirks)
	}
	if !(c.baseCoord >= refmodel.MinBaseCoordination && c.baseCoord <= refmodel.MaxBaseCoordination) {
		return usagef("--base-coordination %v: accepted %v to %v (0: the default base)", c.baseCoord, refmodel.MinBaseCoordination, refmodel.MaxBaseCoordination)
	}
	return nil
}

// Run serves the reference backend until ctx ends.
func (c *RefmodelCommand) Run(ctx context.Context) error {
	logger := slog.New(slog.NewTextHandler(c.Stderr, nil))
	// Adapter paths go into /v1/models and to other programs: absolute.
	dataDir, err := filepath.Abs(c.dataDir)
	if err != nil {
		return fmt.Errorf("--data-dir %s: %w", c.dataDir, err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir %s: %w", c.dataDir, err)
	}
	opts := refmodel.Options{DataDir: dataDir, Seed: c.seed, Logger: logger, BaseCoordination: c.baseCoord}
	if c.strict {
		opts.Strict = &refmodel.Strict{AutoToolChoice: c.auto, Quirks: c.quirks}
	}
	b, err := refmodel.New(opts)
	if err != nil {
		return err
	}
	if err := b.Open(); err != nil {
		return err
	}
	defer b.Close()
	if c.preload {
		names, err := b.LoadStored()
		if err != nil {
			return err
		}
		if len(names) > 0 {
			fmt.Fprintf(c.Stderr, "refmodel: serving %d stored adapters from %s (see /v1/models)\n", len(names), dataDir)
		}
	}
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return fmt.Errorf("listen on --addr %s: %w", c.addr, err)
	}
	fmt.Fprintf(c.Stderr, "refmodel serving on http://%s (OpenAI base URL http://%s/v1, trainer http://%s)\n", ln.Addr(), ln.Addr(), ln.Addr())
	return b.Serve(ctx, ln)
}
