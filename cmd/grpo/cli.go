package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = "dev"

// Main holds the process's streams and environment so that commands can be
// run from tests.
type Main struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// NewMain returns a Main wired to the real process.
func NewMain() *Main {
	return &Main{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// Command is a subcommand in litestream's shape: ParseFlags reads the
// command line and checks it, Run does the work.
type Command interface {
	ParseFlags(args []string) error
	Run(ctx context.Context) error
}

// split runs the Command newCmd makes for m: flags first, then the work.
func split(newCmd func(m *Main) Command) func(m *Main, ctx context.Context, args []string) error {
	return func(m *Main, ctx context.Context, args []string) error {
		c := newCmd(m)
		if err := c.ParseFlags(args); err != nil {
			return err
		}
		return c.Run(ctx)
	}
}

type command struct {
	name    string
	summary string
	run     func(m *Main, ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"run", "run GRPO training (no arguments: the embedded default)", (*Main).run},
		{"runs", "list runs, show one run's steps (runs show RUN), or cancel one offline (runs cancel RUN)", split(func(m *Main) Command { return &RunsCommand{Main: m} })},
		{"best", "print a run's selected step and adapter, or export it (--export DIR)", split(func(m *Main) Command { return &BestCommand{Main: m} })},
		{"promote", "load a run's selected adapter into its endpoints under one stable name", split(func(m *Main) Command { return &PromoteCommand{Main: m} })},
		{"serve", "run the daemon: HTTP API, /metrics, /ws, dashboard", (*Main).serve},
		{"watch", "follow a daemon's runs live, one line per step (watch [RUN] --addr HOST:PORT)", (*Main).watch},
		{"refmodel", "serve the embedded reference backend on its own (refmodel serve)", split(func(m *Main) Command { return &RefmodelCommand{Main: m} })},
		{"eval", "evaluate one or more models on the Dining Philosophers table", split(func(m *Main) Command { return &EvalCommand{Main: m} })},
		{"compare", "compare two runs' checkpoints on shared test tables, or two eval outputs (paired or Welch t-test, Hedges' g)", split(func(m *Main) Command { return &CompareCommand{Main: m} })},
		{"experiment", "run arms x seeds of runs, test their checkpoints, write a report", split(func(m *Main) Command { return &ExperimentCommand{Main: m} })},
		{"bench", "measure client CPU, rollout throughput, step time, the store (bench --help)", split(func(m *Main) Command { return &BenchCommand{Main: m} })},
		{"version", "print the version", split(func(m *Main) Command { return &VersionCommand{Main: m} })},
	}
}

const usageHead = `grpo orchestrates GRPO fine-tuning of LLM agents on the Dining Philosophers
table: grouped rollouts against OpenAI-compatible servers, group-relative
advantages, LoRA trainer jobs, and best-step selection on held-out validation.

Usage:
  grpo <command> [arguments] [flags]

Start with 'grpo run': it trains on the embedded reference backend with no
setup. Flags may come before or after arguments. The configuration file's
keys are documented in docs/CONFIG.md.

Commands:
`

func (m *Main) usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'grpo <command> --help' for a command's flags.\n")
}

// Run executes one command and returns the process exit code: 0 on
// success, 2 for usage errors, 1 for failures.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		// No command: say what there is rather than start a run.
		m.usage(m.Stderr)
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "--help", "help":
		m.usage(m.Stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.run(m, ctx, rest)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(*usageError)):
			fmt.Fprintf(m.Stderr, "grpo %s: %v\nRun 'grpo %s --help' for usage.\n", name, err, name)
			return 2
		default:
			fmt.Fprintf(m.Stderr, "grpo %s: %v\n", name, err)
			return 1
		}
	}
	fmt.Fprintf(m.Stderr, "grpo: unknown command %q\n\n", name)
	m.usage(m.Stderr)
	return 2
}

// usageError is a bad flag or argument: exit code 2 and a pointer to --help.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

// newFlags returns a flag set whose errors come back to the caller and
// whose --help prints the synopsis and defaults on stdout.
func (m *Main) newFlags(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package writes a parse error to the output before it
	// calls Usage, and writes nothing before Usage for --help: the usage
	// goes to stdout only for --help, the error to stderr through Run.
	out := new(flagErrors)
	fs.SetOutput(out)
	fs.Usage = func() {
		if out.seen {
			return
		}
		fs.SetOutput(m.Stdout)
		defer fs.SetOutput(out)
		fmt.Fprintf(m.Stdout, "%s\nFlags:\n", strings.TrimSpace(synopsis))
		fs.PrintDefaults()
	}
	return fs
}

// flagErrors is a flag set's output: it drops the messages (Run prints
// the error) and remembers that one was written.
type flagErrors struct{ seen bool }

func (w *flagErrors) Write(p []byte) (int, error) {
	w.seen = true
	return len(p), nil
}

// parse parses flags that may come before, between or after the
// positional arguments (grpo compare A B --json); a bad flag becomes a
// usageError naming it. Afterwards fs.Args() holds the positional
// arguments in order. A "--" ends the flags: everything after it is
// positional.
func parse(fs *flag.FlagSet, args []string) error {
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return &usageError{err.Error()}
		}
		left := fs.Args()
		if len(left) == 0 {
			break
		}
		if used := len(rest) - len(left); used > 0 && rest[used-1] == "--" {
			pos = append(pos, left...)
			break
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
	// Leave the positional arguments in fs.Args(): "--" stops the parse
	// before any of them is read as a flag.
	return fs.Parse(append([]string{"--"}, pos...))
}

// checkURL checks that flag's value is an absolute http(s) URL; what
// says what the flag expects, e.g. "the daemon's URL".
func checkURL(flagName, value, example string) error {
	u, err := url.Parse(value)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--%s %q: want an http:// or https:// URL, e.g. %s", flagName, value, example)
	}
	return nil
}

// VersionCommand is `grpo version`.
type VersionCommand struct{ *Main }

// ParseFlags parses the command line of `grpo version`.
func (c *VersionCommand) ParseFlags(args []string) error {
	fs := c.newFlags("version", "Usage: grpo version\n\nPrints the version, the Go version and the source revision.")
	return parse(fs, args)
}

// Run prints the version.
func (c *VersionCommand) Run(ctx context.Context) error {
	fmt.Fprintf(c.Stdout, "grpo %s\n", buildVersion())
	return nil
}

func buildVersion() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			v += " (" + rev
			if dirty {
				v += "-dirty"
			}
			v += ")"
		}
		v += " " + bi.GoVersion
	}
	return v
}

// listFlag is a repeatable string flag.
type listFlag []string

var _ flag.Value = (*listFlag)(nil)

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// parseInts parses "5,10,15".
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, usagef("--%s %q: %q is not a whole number (want e.g. 5,10,15)", flagName, s, f)
		}
		if slices.Contains(out, v) {
			return nil, usagef("--%s %q lists %d twice (each value once)", flagName, s, v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, usagef("--%s is empty (want e.g. 5,10,15)", flagName)
	}
	return out, nil
}

// warnLogger is the logger of the commands a person watches (run,
// experiment, eval): warnings and errors, as text, to w.
func warnLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// plural is n and noun, with an s unless n is 1: "1 step", "3 steps".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
