package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
)

const runsSynopsis = `Usage: grpo runs [--db PATH] [--json]
       grpo runs show RUN [--db PATH] [--json]
       grpo runs cancel RUN [--db PATH]

Lists the runs in the store, or shows one run's configuration and steps
(train reward, validation reward with 95% CI, deadlock rate, meals, trainer
job, and whether the step's adapter directory is on this machine's disk).
For a running run, 'runs show' also says which step is being validated and
which step's trainer job is in flight, and, when no live process plays the
run (its process was killed), its last heartbeat and how to resume it.
Safe while a run is training: the store is opened read-only for the moment
of the read.

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
	show   string // the run to show; empty lists the runs
	cancel string // the run to cancel
}

// ParseFlags parses the command line of `grpo runs`.
func (c *RunsCommand) ParseFlags(args []string) error {
	fs := c.newFlags("runs", runsSynopsis)
	fs.StringVar(&c.db, "db", config.Default().Run.DB, "bbolt store")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
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
func (c *RunsCommand) Run(ctx context.Context) (err error) {
	defer func() { err = withRunNames(ctx, c.db, c.show+c.cancel, err) }()
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
	if c.json {
		if list == nil {
			list = []checkpoint.RunSummary{}
		}
		return json.NewEncoder(c.Stdout).Encode(list)
	}
	tw := newTable(c.Stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tSTEPS\tBEST STEP\tCREATED")
	for _, r := range list {
		best := "-"
		if r.BestStep >= 0 {
			best = fmt.Sprint(r.BestStep)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Name, r.State, r.Steps, best, r.Created.Local().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
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
