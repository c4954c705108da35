package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/experiment"
	"github.com/grpo-dev/grpo/internal/fsutil"
	"github.com/grpo-dev/grpo/run"
)

const experimentSynopsis = `Usage: grpo experiment FILE.yaml [--db DB] [--out DIR] [--json]

Runs an experiment (DESIGN §11): one run per arm and seed, named
<experiment>/<arm>/<seed>, in one store; measures each run's base, best
and last checkpoints on the test split; and writes report.md,
summary.json and two plots (curves.png: the validation curves;
test.png: test reward, deadlock rate and meals by checkpoint and arm; a
reward panel per reward function in each) into the experiment's out
directory (--out DIR instead; --db DB instead of experiment.db). Running
the file again reuses finished runs and stored test measurements, and
resumes unfinished runs: nothing is trained twice. The last line names
every file written.

  experiment: {name: NAME, seeds: [1, 2, 3], db: NAME.db, out: NAME}
  base: {run: {steps: 16}}                   # a run config every arm starts from
  arms:
    - {name: shaped, set: {reward: {function: shaped}}}   # deep-merged over base
    - {name: paper,  set: {reward: {function: paper}}}
  test: {n: [5, 10, 15], episodes: 100, seed: 2000000, steps: [base, best, last]}
`

// ExperimentCommand is `grpo experiment`.
type ExperimentCommand struct {
	*Main
	file, db, out string
	json          bool
}

// ParseFlags parses the command line of `grpo experiment`.
func (c *ExperimentCommand) ParseFlags(args []string) error {
	fs := c.newFlags("experiment", experimentSynopsis)
	fs.StringVar(&c.db, "db", "", "the experiment's store (default: experiment.db)")
	fs.StringVar(&c.out, "out", "", "directory for report.md, summary.json, curves.png and test.png (default: experiment.out)")
	fs.BoolVar(&c.json, "json", false, "print summary.json on stdout")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// Flags may follow the file: grpo experiment FILE --json.
		c.file = fs.Arg(0)
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
	}
	if c.file == "" || fs.NArg() != 0 {
		return usagef("want one experiment file (grpo experiment FILE.yaml [--db DB] [--out DIR] [--json])")
	}
	return nil
}

// Run plays or reuses every run, measures the checkpoints and writes the
// report.
func (c *ExperimentCommand) Run(ctx context.Context) error {
	f, err := experiment.Load(c.file)
	if err != nil {
		return err
	}
	if c.out != "" {
		f.Out = c.out
	}
	if c.db != "" {
		f.DB = c.db
	}
	store := checkpoint.New(f.DB, checkpoint.Options{})
	if err := store.Check(ctx); err != nil {
		return err
	}
	view := newRunView(c.Stderr, false)
	opts := run.Options{
		Store: store, DataDir: f.DB + ".data", Getenv: c.Getenv,
		Logger:      warnLogger(c.Stderr),
		Events:      view.event,
		Interrupted: checkpoint.StateCancelled,
	}
	total, i := len(f.Arms)*len(f.Seeds), 0
	var results []experiment.RunResult
	for _, a := range f.Arms {
		for _, seed := range f.Seeds {
			i++
			cfg, err := f.Config(a.Name, seed)
			if err != nil {
				return err
			}
			name := cfg.Run.Name
			status, err := c.playRun(ctx, store, cfg, opts)
			view.finish()
			if errors.Is(err, errConfigChanged) {
				return fmt.Errorf("experiment %s: run %s: %w", f.Name, name, err)
			}
			if err != nil {
				return fmt.Errorf("experiment %s: run %s: %w (rerun the same command to resume)", f.Name, name, err)
			}
			res, measured, err := c.measure(ctx, f, store, cfg)
			if err != nil {
				return fmt.Errorf("experiment %s: run %s: test split: %w", f.Name, name, err)
			}
			res.Arm, res.Seed = a.Name, seed
			fmt.Fprintf(c.Stderr, "[%d/%d] %s: %s; best step %d, last step %d; %s\n", i, total, name, status, res.BestStep, res.LastStep, measured)
			results = append(results, res)
		}
	}
	sum, err := f.Summarize(results)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.Out, 0o755); err != nil {
		return fmt.Errorf("create report directory: %w", err)
	}
	js, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := writeReportFile(filepath.Join(f.Out, "summary.json"), append(js, '\n')); err != nil {
		return fmt.Errorf("write summary.json: %w", err)
	}
	plots, err := f.WritePlots(f.Out, sum, results)
	if err != nil {
		return err
	}
	var rep bytes.Buffer
	if err := f.WriteReport(&rep, sum, "grpo experiment "+c.file, plots); err != nil {
		return err
	}
	if err := writeReportFile(filepath.Join(f.Out, "report.md"), rep.Bytes()); err != nil {
		return fmt.Errorf("write report.md: %w", err)
	}
	if c.json {
		_, err := c.Stdout.Write(append(js, '\n'))
		return err
	}
	var written []string
	for _, p := range append([]string{"report.md", "summary.json"}, plots...) {
		written = append(written, filepath.Join(f.Out, p))
	}
	fmt.Fprintf(c.Stdout, "experiment %s: %d runs in %s; wrote %s\n", f.Name, total, f.DB, strings.Join(written, ", "))
	return nil
}

// writeReportFile writes an experiment's file whole or not at all (a kill
// leaves the previous one), readable by all as os.WriteFile would make it.
func writeReportFile(path string, data []byte) error {
	if err := fsutil.WriteFileAtomic(path, data); err != nil {
		return err
	}
	return os.Chmod(path, 0o644)
}

// playRun trains cfg's run, resumes it, or reuses it when it is finished.
// A stored run of that name with another config is an error: the file
// changed under a finished experiment.
func (c *ExperimentCommand) playRun(ctx context.Context, store *checkpoint.Store, cfg config.Config, opts run.Options) (string, error) {
	name := cfg.Run.Name
	var r *run.Run
	rec, err := store.GetRun(ctx, name)
	switch {
	case errors.Is(err, checkpoint.ErrRunNotFound) || errors.Is(err, checkpoint.ErrNoDatabase):
		if r, err = run.Open(ctx, cfg, opts); err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	default:
		stored, err := config.FromJSON(rec.Config)
		if err != nil {
			return "", fmt.Errorf("stored config: %w", err)
		}
		// The test split is the experiment's, not the training's: a run
		// trained under another test section is the same run; so is one
		// trained on servers at other addresses (a stack restarted on
		// other ports) or with other timeouts, retries or concurrency
		// (given by the file or by an older grpo's defaults). It resumes
		// with the file's.
		stored.Test = cfg.Test
		if was, now := stored.Outcome().JSON(), cfg.Outcome().JSON(); !bytes.Equal(was, now) {
			return "", fmt.Errorf("%w: the store %s holds run %s trained with %s; use another experiment name or db, or undo the change",
				errConfigChanged, cfg.Run.DB, name, strings.Join(configDiff(was, now, 3), ", "))
		}
		opts.Relocate = &cfg
		if r, err = run.Reopen(ctx, name, opts); err != nil {
			return "", err
		}
	}
	defer r.Close()
	status := "trained"
	if r.Finished() {
		status = "reused (already finished)"
	} else if err == nil && rec.Name != "" {
		status = "resumed and finished"
	}
	start := time.Now()
	if err := r.Play(ctx); err != nil {
		return "", err
	}
	if status != "reused (already finished)" {
		status += fmt.Sprintf(" in %.1fs", time.Since(start).Seconds())
	}
	return status, nil
}

// errConfigChanged: the experiment file (or this grpo's defaults) now
// gives a stored run another training config.
var errConfigChanged = errors.New("the run's training config changed")

// configDiff lists up to limit keys whose values differ between two JSON
// configs, as "key: old (now new)".
func configDiff(old, now []byte, limit int) []string {
	var a, b any
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(now, &b) != nil {
		return []string{"another config"}
	}
	var out []string
	var walk func(key string, a, b any)
	walk = func(key string, a, b any) {
		ma, okA := a.(map[string]any)
		mb, okB := b.(map[string]any)
		if okA && okB {
			keys := slices.Sorted(maps.Keys(ma))
			for k := range mb {
				if _, ok := ma[k]; !ok {
					keys = append(keys, k)
				}
			}
			for _, k := range keys {
				walk(strings.TrimPrefix(key+"."+k, "."), ma[k], mb[k])
			}
			return
		}
		if !reflect.DeepEqual(a, b) {
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			out = append(out, fmt.Sprintf("%s: %s (now %s)", key, ja, jb))
		}
	}
	walk("", a, b)
	if len(out) > limit {
		out = append(out[:limit], fmt.Sprintf("and %d more", len(out)-limit))
	}
	if len(out) == 0 {
		return []string{"another config"}
	}
	return out
}

// measure returns the run's test results for the experiment's checkpoint
// kinds, measuring (and storing) only those not already stored with the
// experiment's test split.
func (c *ExperimentCommand) measure(ctx context.Context, f *experiment.File, store *checkpoint.Store, cfg config.Config) (experiment.RunResult, string, error) {
	name := cfg.Run.Name
	rep, err := loadReport(ctx, store, name)
	if err != nil {
		return experiment.RunResult{}, "", err
	}
	picks, err := rep.choose(f.Test.Steps)
	if err != nil {
		return experiment.RunResult{}, "", err
	}
	stored := map[int]checkpoint.Evaluation{}
	for _, te := range rep.tests {
		if te.Seed == f.Test.Seed && sameSplit(te.Evaluation, f.Test.N, f.Test.Episodes) {
			stored[te.Evaluation.Step] = te.Evaluation
		}
	}
	var need []pick
	for _, p := range picks {
		if _, ok := stored[p.step]; !ok && !slices.ContainsFunc(need, func(q pick) bool { return q.step == p.step }) {
			need = append(need, p)
		}
	}
	measured := "test results reused"
	if len(need) > 0 {
		keep, err := testStorer(ctx, c.Stderr, store, name, f.Test.Seed)
		if err != nil {
			return experiment.RunResult{}, "", err
		}
		_, done, err := testCheckpoints(ctx, c.Getenv, c.Stderr, cfg, need, f.Test.N, f.Test.Episodes,
			evalOptions{concurrency: cfg.Inference.Concurrency, timeout: time.Duration(cfg.Inference.RequestTimeout), retries: cfg.Inference.Retries, retryBudget: time.Duration(cfg.Inference.RetryBudget), outage: time.Duration(cfg.Inference.OutageWindow)}, keep)
		if err != nil {
			return experiment.RunResult{}, "", err
		}
		for s, res := range done {
			stored[s] = res.Evaluation(s)
		}
		measured = fmt.Sprintf("measured %s on the test split", plural(len(need), "checkpoint"))
	}
	res := experiment.RunResult{Run: name, BestStep: -1, LastStep: rep.steps[len(rep.steps)-1].Step, Tests: map[string]checkpoint.Evaluation{}}
	if rep.sel != nil {
		res.BestStep = rep.sel.Step
	}
	for _, p := range picks {
		res.Tests[p.selectedBy] = stored[p.step]
	}
	res.ValidationN = cfg.Validation.N
	res.Validation = map[int]float64{}
	for s, ev := range rep.evals {
		res.Validation[s] = ev.RewardMean
	}
	return res, measured, nil
}

// sameSplit reports whether ev measured exactly the sizes ns with
// episodes tables each.
func sameSplit(ev checkpoint.Evaluation, ns []int, episodes int) bool {
	if len(ev.PerN) != len(ns) || len(ev.Records) != len(ns)*episodes {
		return false
	}
	for i, p := range ev.PerN {
		if p.N != ns[i] {
			return false
		}
	}
	return true
}
