package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
)

const runsSynopsis = `Usage: grpo runs [--db PATH] [--json] [--sort KEY]
       grpo runs show RUN [--db PATH] [--json]
       grpo runs cancel RUN [--db PATH]

Lists the runs in the store: each run's state, last step, best step (by
the run's selection policy), that step's value (its validation metric,
smoothed as the policy smooths it) and the deadlock rate of its
validation. --sort orders the list: created (oldest first, the default),
name, state, steps (most first), best (best value first, by each run's
metric: highest reward or meals, lowest deadlock rate; runs without one
last) or deadlock (lowest deadlock rate first; runs without one last).

'runs show' shows one run's configuration and steps
(train reward, validation reward with 95% CI, deadlock rate, meals, trainer
job, and whether the step's adapter directory is on this machine's disk).
For a running run, 'runs show' also says which step is being validated and
which step's trainer job is in flight, and, when no live process plays the
run (its process was killed), its last heartbeat and how to resume it.
Safe while a run is training: the store is opened read-only for the moment
of the read (a store written by a grpo without run summaries has each
run's summary written once, at its first listing).

'runs cancel' marks a running run cancelled in the store without any daemon
(offline), so that no daemon resumes it, e.g. a run that crashes the daemon
at every start. It refuses a run that a live process is playing: cancel
it there (POST /api/v1/runs/RUN/cancel, or Ctrl-C).
`

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// openStore returns the store at path for reading; a missing file is an
// error naming it (reading must not look like an empty store).
func openStore(path string) (*checkpoint.Store, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("store %s does not exist (--db names the bbolt file a run or the daemon wrote)", path)
	case err != nil:
		return nil, fmt.Errorf("open store: %w", err)
	case fi.IsDir():
		return nil, fmt.Errorf("store %s is a directory; --db names the bbolt file", path)
	}
	return checkpoint.New(path, checkpoint.Options{}), nil
}

// RunsCommand is `grpo runs` and `grpo runs show RUN`.
type RunsCommand struct {
	*Main
	db     string
	json   bool
	sort   string // the list's order: one of runSortKeys
	show   string // the run to show; empty lists the runs
	cancel string // the run to cancel
}

// ParseFlags parses the command line of `grpo runs`.
func (c *RunsCommand) ParseFlags(args []string) error {
	fs := c.newFlags("runs", runsSynopsis)
	fs.StringVar(&c.db, "db", config.Default().Run.DB, "bbolt store")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.StringVar(&c.sort, "sort", "created", "order of the list: "+strings.Join(runSortKeys, ", "))
	if err := parse(fs, args); err != nil {
		return err
	}
	if !slices.Contains(runSortKeys, c.sort) {
		return usagef("--sort %q: accepted: %s", c.sort, strings.Join(runSortKeys, ", "))
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "cancel" {
		if err := parse(fs, rest[1:]); err != nil {
			return err
		}
		names := fs.Args()
		if len(names) == 0 {
			return usagef("runs cancel needs a run name")
		}
		if err := parse(fs, names[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usagef("unexpected argument %q", fs.Arg(0))
		}
		c.cancel = names[0]
		return nil
	}
	if len(rest) > 0 && rest[0] == "show" {
		// Flags may also follow the run name: grpo runs show RUN --json.
		if err := parse(fs, rest[1:]); err != nil {
			return err
		}
		names := fs.Args()
		if len(names) > 0 {
			if err := parse(fs, names[1:]); err != nil {
				return err
			}
		}
		if len(names) == 0 {
			return usagef("runs show needs a run name")
		}
		if fs.NArg() > 0 {
			return usagef("runs show takes one run name: unexpected argument %q", fs.Arg(0))
		}
		c.show = names[0]
		return nil
	}
	if len(rest) > 0 {
		return usagef("unexpected argument %q (want 'grpo runs', 'grpo runs show RUN' or 'grpo runs cancel RUN')", rest[0])
	}
	return nil
}

// Run lists the runs, or shows one.
func (c *RunsCommand) Run(ctx context.Context) error {
	if c.show != "" {
		return c.showRun(ctx, c.db, c.show, c.json)
	}
	if c.cancel != "" {
		store, err := openStore(c.db)
		if err != nil {
			return err
		}
		if err := store.CancelRun(ctx, c.cancel, "cancelled offline (grpo runs cancel)", checkpoint.LeaseOptions{}); err != nil {
			return err
		}
		fmt.Fprintf(c.Stdout, "run %s cancelled in %s; no daemon will resume it\n", c.cancel, c.db)
		return nil
	}
	store, err := openStore(c.db)
	if err != nil {
		return err
	}
	list, err := store.ListRuns(ctx)
	if err != nil {
		return err
	}
	sortRuns(list, c.sort)
	if c.json {
		if list == nil {
			list = []checkpoint.RunSummary{}
		}
		return json.NewEncoder(c.Stdout).Encode(list)
	}
	tw := newTable(c.Stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tSTEPS\tBEST STEP\tBEST VALUE\tDEADLOCK\tCREATED")
	for _, r := range list {
		best, value, deadlock := "-", "-", "-"
		if r.BestStep >= 0 {
			best = fmt.Sprint(r.BestStep)
		}
		if r.BestValue != nil {
			value = fmt.Sprintf("%.3f %s", *r.BestValue, r.Metric)
		}
		if r.BestDeadlockRate != nil {
			deadlock = fmt.Sprintf("%.3f", *r.BestDeadlockRate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Name, r.State, r.Steps, best, value, deadlock, r.Created.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

// runSortKeys are the orders of 'grpo runs --sort'; the first is the
// default.
var runSortKeys = []string{"created", "name", "state", "steps", "best", "deadlock"}

// sortRuns orders list (oldest first, as ListRuns lists it) by key, ties
// staying oldest first.
func sortRuns(list []checkpoint.RunSummary, key string) {
	// absentLast orders runs without a value after those with one.
	absentLast := func(a, b *float64, by func(x, y float64) int) int {
		switch {
		case a == nil && b == nil:
			return 0
		case a == nil:
			return 1
		case b == nil:
			return -1
		}
		return by(*a, *b)
	}
	var by func(a, b checkpoint.RunSummary) int
	switch key {
	case "name":
		by = func(a, b checkpoint.RunSummary) int { return cmp.Compare(a.Name, b.Name) }
	case "state":
		by = func(a, b checkpoint.RunSummary) int { return cmp.Compare(a.State, b.State) }
	case "steps":
		by = func(a, b checkpoint.RunSummary) int { return cmp.Compare(b.Steps, a.Steps) }
	case "best":
		by = func(a, b checkpoint.RunSummary) int {
			return absentLast(a.BestValue, b.BestValue, func(x, y float64) int {
				// Each run's own direction: a lower deadlock rate is better.
				if a.Metric.Minimized() {
					x = -x
				}
				if b.Metric.Minimized() {
					y = -y
				}
				return cmp.Compare(y, x)
			})
		}
	case "deadlock":
		by = func(a, b checkpoint.RunSummary) int {
			return absentLast(a.BestDeadlockRate, b.BestDeadlockRate, cmp.Compare[float64])
		}
	default: // created: as listed
		return
	}
	slices.SortStableFunc(list, by)
}

func (m *Main) showRun(ctx context.Context, db, name string, asJSON bool) error {
	store, err := openStore(db)
	if err != nil {
		return err
	}
	// What is under way, read before the steps (GetUnderway).
	u, err := store.GetUnderway(ctx, name)
	if err != nil {
		return err
	}
	r, err := loadReport(ctx, store, name)
	if err != nil {
		return err
	}
	out := checkpoint.NewRunView(r.run, r.steps, r.evalList)
	out.SetUnderway(u)
	if !asJSON {
		r.underway, r.db = &out, db
		r.print(m.Stdout)
		return nil
	}
	out.Tests = r.tests
	promote.MarkOnDisk(&out)
	enc := json.NewEncoder(m.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
