package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
)

const bestSynopsis = `Usage: grpo best [RUN] [--db PATH] [--json]
       grpo best RUN --export DIR [--step best|last|base|N] [--force] [--db PATH] [--json]

Prints the selected step of RUN (default: the most recent run) under the
run's selection policy (best-validation by default), its adapter, its
score, and the last step's score for comparison.

With --export, copies the step's adapter directory into DIR atomically
(a temporary directory beside DIR, every file synced, then renamed) and
writes grpo-checkpoint.json beside the adapter files: run, step, selection
policy, metric and value, validation figures, base model, LoRA settings,
the run's config and a SHA-256 content hash of the adapter files. --step
exports another step the same way; step 0 (base) has no adapter, so only
the manifest is written. A DIR that exists and is not empty is refused
unless --force, which replaces it; a DIR holding the store, or overlapping
the run's data directory or a step's adapter directory, is refused even
with --force.

A run that failed has no trustworthy result: best says so, with the run's
error and the best of its committed steps, and exits 1 (--export of a
failed run's step works, with --step). A run still running or cancelled is
reported with its state.
`

// BestCommand is `grpo best`.
type BestCommand struct {
	*Main
	db     string
	json   bool
	name   string // empty: the most recent run
	export string // directory to export to; empty: print only
	step   string
	force  bool
	pick   promote.Pick
}

// ParseFlags parses the command line of `grpo best`.
func (c *BestCommand) ParseFlags(args []string) error {
	fs := c.newFlags("best", bestSynopsis)
	fs.StringVar(&c.db, "db", config.Default().Run.DB, "bbolt store")
	fs.BoolVar(&c.json, "json", false, "print JSON (with --export: the manifest)")
	fs.StringVar(&c.export, "export", "", "copy the step's adapter and a grpo-checkpoint.json manifest into this directory")
	fs.StringVar(&c.step, "step", "best", "with --export: best | last | base | a step number")
	fs.BoolVar(&c.force, "force", false, "with --export: replace a non-empty directory")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		c.name = fs.Arg(0)
		if err := parse(fs, fs.Args()[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.export == "" && (set["step"] || set["force"]) {
		return usagef("--step and --force go with --export DIR")
	}
	if set["export"] && c.export == "" {
		return usagef("--export needs a directory")
	}
	var err error
	if c.pick, err = promote.ParsePick(c.step); err != nil {
		return usagef("--%v", err)
	}
	return nil
}

// Run prints the run's selected step, or exports a step.
func (c *BestCommand) Run(ctx context.Context) (err error) {
	defer func() { err = withRunNames(ctx, c.db, c.name, err) }()
	store, err := openStore(c.db)
	if err != nil {
		return err
	}
	name, err := runOrLatest(ctx, store, c.name)
	if err != nil {
		return err
	}
	if c.export != "" {
		return c.runExport(ctx, store, name)
	}
	r, err := loadReport(ctx, store, name)
	if err != nil {
		return err
	}
	if r.run.State == checkpoint.StateFailed {
		msg := fmt.Sprintf("run %s failed: %s", name, r.run.Error)
		if r.sel != nil {
			msg += fmt.Sprintf("; its best committed step was %d (%s %.4f), see 'grpo runs show %s%s'", r.sel.Step, r.run.Metric, r.sel.Value, name, dbFlag(c.db))
		}
		return errors.New(msg)
	}
	if r.sel == nil {
		return fmt.Errorf("run %s (%s) has no selectable step yet under %s", name, r.run.State, r.run.Policy)
	}
	out := checkpoint.BestView{Run: name, Selection: *r.sel}
	if c.json {
		return json.NewEncoder(c.Stdout).Encode(out)
	}
	adapter := "base model (no adapter)"
	if a := r.sel.Adapter; a != nil {
		adapter = a.Name + " at " + a.Path
	}
	state := ""
	if r.run.State != checkpoint.StateSucceeded {
		if r.run.State == checkpoint.StateRunning {
			// Whether a live process plays it, as runs show says.
			u, err := store.GetUnderway(ctx, name)
			if err != nil {
				return err
			}
			var v checkpoint.RunView
			v.SetUnderway(u)
			r.underway = &v
		}
		state = " (" + r.stateLabel() + ")"
	}
	fmt.Fprintf(c.Stdout, "run %s%s: best step %d by %s (%s %.4f); adapter %s\nlast step %d: %.4f\n",
		name, state, r.sel.Step, r.sel.Policy, r.run.Metric, r.sel.Value, adapter, r.sel.LastStep, r.sel.LastValue)
	return nil
}

func (c *BestCommand) runExport(ctx context.Context, store *checkpoint.Store, name string) error {
	cp, err := promote.Resolve(ctx, store, name, c.pick)
	if err != nil {
		return err
	}
	m, err := promote.Export(ctx, cp, c.export, c.force, time.Now())
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(c.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	value := "not evaluated"
	if m.Value != nil {
		value = fmt.Sprintf("%s %.4f", m.Metric, *m.Value)
	}
	if m.Adapter == nil {
		fmt.Fprintf(c.Stdout, "run %s step %d (%s) is the base model %s: there is no adapter to copy; wrote %s/%s only\n",
			name, m.Step, m.SelectedBy, m.BaseModel, c.export, promote.ManifestFile)
		return nil
	}
	fmt.Fprintf(c.Stdout, "exported run %s step %d (%s; %s) to %s: %d files, sha256 %s; manifest %s\n",
		name, m.Step, m.SelectedBy, value, c.export, len(m.Adapter.Files), m.Adapter.SHA256, promote.ManifestFile)
	return nil
}

// runOrLatest is name, or the most recent run of the store when empty.
func runOrLatest(ctx context.Context, store *checkpoint.Store, name string) (string, error) {
	if name != "" {
		return name, nil
	}
	list, err := store.ListRuns(ctx)
	if err != nil {
		return "", err
	}
	if len(list) == 0 {
		return "", fmt.Errorf("no runs in %s", store.Path())
	}
	return list[len(list)-1].Name, nil
}
