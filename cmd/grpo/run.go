package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/run"
)

const runSynopsis = `Usage: grpo run [--config FILE] [--db PATH] [--resume RUN] [flags]

Runs GRPO training: each step samples groups of episodes, computes
group-relative advantages, submits a LoRA update to the trainer, hot-loads
the new adapter into the inference servers, validates it on held-out seeds,
and records everything in the store (bbolt). The best step is selected on
validation, not the last one.

With no arguments it runs the embedded default: the reference backend
(a small learnable policy behind a vLLM-compatible API and the trainer job
API) is started in-process on loopback ports, and the study's recipe is run
(n=5, 5 rounds, 2 groups x 3 episodes, 16 steps, LoRA rank 8) with the
shaped reward and best-validation selection.

A run killed at any point continues with 'grpo run --resume RUN': committed
steps are kept, the in-flight trainer job is reattached, and no step is
trained twice or skipped. 'grpo run --resume RUN --steps N' with N above
the run's steps extends it, a finished run too: its stored config is
updated and the steps added are played. A run that failed because its step's trainer job
failed or was cancelled fails the same way when resumed (the job id is the
trainer's idempotency key); once the cause is fixed, 'grpo run --resume RUN
--retry-job' submits that job again under a new id (<id>-retry-2, -3, ...).
When the servers moved (a stack restarted on other ports), 'grpo run
--resume RUN --config FILE' plays the rest on FILE's inference.endpoints and
trainer.url, with its timeouts and retries; FILE must otherwise train the
same run (any other difference is refused, naming it).
`

// runCommand is 'grpo run': what its flags ask for.
type runCommand struct {
	config, db, resume, name, dataDir string
	steps                             int
	seed                              int64
	quiet, retryJob                   bool
	// set holds the flags given on the command line: --steps 0 and
	// --seed 0 are values, not "unset".
	set map[string]bool
}

func (m *Main) run(ctx context.Context, args []string) error {
	var c runCommand
	if err := c.parse(m, args); err != nil {
		return err
	}
	return c.play(ctx, m)
}

func (c *runCommand) parse(m *Main, args []string) error {
	fs := m.newFlags("run", runSynopsis)
	fs.StringVar(&c.config, "config", "", "run configuration YAML, every key documented in docs/CONFIG.md; default: every field at its default. With --resume: the servers (inference.endpoints, trainer.url), timeouts and retries to play the rest on; it must otherwise train the stored run")
	fs.StringVar(&c.db, "db", "", "bbolt store (default: run.db from the config, grpo.db)")
	fs.StringVar(&c.resume, "resume", "", "continue run RUN from its last committed step, with its stored config")
	fs.StringVar(&c.name, "name", "", "run name (default: run.name, or generated)")
	fs.IntVar(&c.steps, "steps", 0, "training steps, at least 1 (default: run.steps, 16); with --resume, raises a stored run's steps, so a finished run goes on to N")
	fs.Int64Var(&c.seed, "seed", 0, "seed, any integer (default: run.seed, 1)")
	fs.StringVar(&c.dataDir, "data-dir", "", "embedded backend's adapters and jobs (default: <db>.data next to the store; with --resume, the directory the run's adapters are in)")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress output on stderr")
	fs.BoolVar(&c.retryJob, "retry-job", false, "with --resume: when the step's trainer job ended failed or cancelled, submit it again under a new job id (same rollouts and adapter name) instead of failing the same way")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	c.set = givenFlags(fs)
	if c.resume != "" && (c.set["name"] || c.set["seed"]) {
		return usagef("--resume uses the run's stored config: drop --name and --seed (--steps may raise its steps; --config may move it to other servers)")
	}
	if c.retryJob && c.resume == "" {
		return usagef("--retry-job retries a stored run's trainer job: use it with --resume RUN")
	}
	// Seeds are any int64 (0 included); a step count is at least 1.
	if c.set["steps"] && c.steps < 1 {
		return usagef("--steps %d: need at least 1 (a whole number of training steps)", c.steps)
	}
	return nil
}

// extend raises the steps of stored run c.resume to --steps, when that
// is more than it planned, so that a resume plays the steps added (a
// finished run too); w hears of it. Fewer steps are refused: the steps
// committed stay as they are, so a run can only be lengthened.
func (c *runCommand) extend(ctx context.Context, w io.Writer) error {
	path := c.db
	if path == "" {
		path = config.Default().Run.DB
	}
	store := checkpoint.New(path, checkpoint.Options{})
	rec, err := store.GetRun(ctx, c.resume)
	if err != nil {
		return withRunNames(ctx, path, c.resume, err)
	}
	cfg, err := config.FromJSON(rec.Config)
	if err != nil {
		return fmt.Errorf("stored config of run %s: %w", c.resume, err)
	}
	switch from := cfg.Run.Steps; {
	case c.steps == from:
		return nil
	case c.steps < from:
		return usagef("--steps %d: run %s plans %d steps; with --resume, --steps can only raise them (a resume never drops committed steps)", c.steps, c.resume, from)
	}
	// Another process playing the run keeps it as it is.
	if l, live, err := store.GetLease(ctx, c.resume, checkpoint.LeaseOptions{}); err != nil {
		return fmt.Errorf("extend run %s: %w", c.resume, err)
	} else if live {
		return fmt.Errorf("extend run %s: %w: %s", c.resume, checkpoint.ErrLeased, l)
	}
	from := cfg.Run.Steps
	cfg.Run.Steps = c.steps
	if err := cfg.Validate(); err != nil {
		return usagef("--steps %d: %v", c.steps, err)
	}
	if err := store.ExtendRun(ctx, c.resume, c.steps, cfg.JSON()); err != nil {
		return err
	}
	fmt.Fprintf(w, "extending %s from %d to %d steps\n", c.resume, from, c.steps)
	return nil
}

// open opens the run the flags name: a stored one with --resume, else a
// new one from the config file and the flags that override it.
func (c *runCommand) open(ctx context.Context, opts run.Options) (*run.Run, error) {
	withStore := func(path string) run.Options {
		opts.Store = checkpoint.New(path, checkpoint.Options{})
		opts.DataDir = c.dataDir
		if opts.DataDir == "" {
			opts.DataDir = path + ".data"
		}
		return opts
	}
	if c.resume != "" {
		path := c.db
		if path == "" {
			path = config.Default().Run.DB
		}
		opts := withStore(path)
		if err := opts.Store.Check(ctx); err != nil {
			return nil, err
		}
		if c.dataDir == "" {
			// Where the run kept its adapters: a daemon's run under
			// <db>.data/<run>, or another --data-dir given before.
			if dir, ok := run.StoredDataDir(ctx, opts.Store, c.resume); ok {
				opts.DataDir = dir
			}
		}
		if c.config != "" {
			to, err := c.relocation(ctx, opts.Store)
			if err != nil {
				return nil, withRunNames(ctx, path, c.resume, err)
			}
			opts.Relocate = &to
		}
		r, err := run.Reopen(ctx, c.resume, opts)
		return r, withRunNames(ctx, path, c.resume, err)
	}
	var cfg config.Config
	var err error
	if c.config != "" {
		cfg, err = config.Load(c.config, config.WithEmbedded(run.ConfigDefaults()))
	} else {
		cfg, err = config.Parse(nil, config.WithEmbedded(run.ConfigDefaults()))
	}
	if err != nil {
		return nil, err
	}
	c.override(&cfg)
	// Nothing is written into a damaged file: another run's damage too
	// stops a new one.
	opts = withStore(cfg.Run.DB)
	if err := opts.Store.Check(ctx); err != nil {
		return nil, err
	}
	return run.Open(ctx, cfg, opts)
}

// relocation reads --config for a resume: it must train what stored run
// c.resume trains (the same Outcome, but for the run's name and steps,
// which are the stored run's), and gives the servers and timeouts the
// rest of the run uses.
func (c *runCommand) relocation(ctx context.Context, store *checkpoint.Store) (config.Config, error) {
	rec, err := store.GetRun(ctx, c.resume)
	if err != nil {
		return config.Config{}, err
	}
	stored, err := config.FromJSON(rec.Config)
	if err != nil {
		return config.Config{}, fmt.Errorf("stored config of run %s: %w", c.resume, err)
	}
	to, err := config.Load(c.config, config.WithEmbedded(run.ConfigDefaults()))
	if err != nil {
		return config.Config{}, err
	}
	to.Run.Name, to.Run.Steps = stored.Run.Name, stored.Run.Steps
	if was, now := stored.Outcome().JSON(), to.Outcome().JSON(); !bytes.Equal(was, now) {
		return config.Config{}, usagef("--config %s trains another run than %s (%s): with --resume, a config may change only where the run's servers are (inference.endpoints, trainer.url), timeouts, retries and concurrency",
			c.config, c.resume, strings.Join(configDiff(was, now, 3), ", "))
	}
	return to, nil
}

// withExistsHint adds to err, when it says the run's name is taken, how
// to continue that run or start another.
func withExistsHint(err error, name, db string) error {
	if !errors.Is(err, checkpoint.ErrRunExists) {
		return err
	}
	if db == "" {
		db = config.Default().Run.DB
	}
	if name == "" {
		return fmt.Errorf("%w: choose another name with --name", err)
	}
	return fmt.Errorf("%w: continue it with 'grpo run --resume %s --db %s', or choose another name with --name", err, name, db)
}

// override sets in cfg what the flags given on the command line ask for.
func (c *runCommand) override(cfg *config.Config) {
	if c.name != "" {
		cfg.Run.Name = c.name
	}
	if c.set["steps"] {
		cfg.Run.Steps = c.steps
	}
	if c.set["seed"] {
		cfg.Run.Seed = c.seed
	}
	if c.db != "" {
		cfg.Run.DB = c.db
	}
}

// play opens the run, plays it with its progress on stderr, and prints
// its table read back from the store.
func (c *runCommand) play(ctx context.Context, m *Main) error {
	view := newRunView(m.Stderr, c.quiet)
	if c.resume != "" && c.set["steps"] {
		if err := c.extend(ctx, m.Stderr); errors.Is(err, checkpoint.ErrLeased) {
			return c.leased(c.resume, c.db, err)
		} else if err != nil {
			return err
		}
	}
	r, err := c.open(ctx, run.Options{
		Getenv:      m.Getenv,
		Logger:      warnLogger(m.Stderr),
		Events:      view.event,
		Interrupted: checkpoint.StateCancelled,

		RetryEndedJob: c.retryJob,
	})
	if errors.Is(err, checkpoint.ErrLeased) {
		return c.leased(c.resume, c.db, err)
	}
	if err != nil {
		return withExistsHint(err, c.name, c.db)
	}
	defer r.Close()
	if c.resume != "" && !r.Finished() {
		// Resumed by hand: starts a daemon counted against the run
		// (grpo serve --max-failed-starts) are forgiven.
		if err := checkpoint.New(r.Config().Run.DB, checkpoint.Options{}).ResetStarts(ctx, c.resume); err != nil {
			return err
		}
	}

	cfg := r.Config()
	if r.Finished() {
		fmt.Fprintf(m.Stderr, "run %s already finished all its %s; store %s\n", cfg.Run.Name, plural(cfg.Run.Steps, "step"), cfg.Run.DB)
	} else {
		fmt.Fprintf(m.Stderr, "run %s: %s, n=%d, %s reward, store %s\n", cfg.Run.Name, plural(cfg.Run.Steps, "step"), cfg.Env.N, cfg.Reward.Function, cfg.Run.DB)
	}
	start := time.Now()
	err = r.Play(ctx)
	view.finish()
	if err != nil {
		if errors.Is(err, checkpoint.ErrLeased) {
			return c.leased(cfg.Run.Name, cfg.Run.DB, err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("run %s interrupted (%v); continue it with: grpo run --resume %s --db %s", cfg.Run.Name, err, cfg.Run.Name, cfg.Run.DB)
		}
		if errors.Is(err, checkpoint.ErrRunExists) { // created meanwhile by another process
			return withExistsHint(err, cfg.Run.Name, cfg.Run.DB)
		}
		resume := fmt.Sprintf("grpo run --resume %s --db %s", cfg.Run.Name, cfg.Run.DB)
		if run.JobEnded(err) && cfg.Trainer.Kind != config.TrainerART {
			resume += " --retry-job" // the ended job would only end the run again
		}
		return fmt.Errorf("run %s: %w (see 'grpo runs show %s --db %s'; once the cause is fixed, '%s' continues from the last committed step)",
			cfg.Run.Name, err, cfg.Run.Name, cfg.Run.DB, resume)
	}
	report, err := loadReport(ctx, checkpoint.New(cfg.Run.DB, checkpoint.Options{}), cfg.Run.Name)
	if err != nil {
		return err
	}
	report.noValidationCompare = cfg.Test.Set()
	report.print(m.Stdout)
	if cfg.Test.Set() && report.sel != nil {
		if err := report.printTest(ctx, m, cfg); err != nil {
			return fmt.Errorf("run %s: test split: %w", cfg.Run.Name, err)
		}
	}
	db := dbFlag(cfg.Run.DB)
	fmt.Fprintf(m.Stdout, "finished in %.1fs; store %s; read back with 'grpo runs show %s%s' and 'grpo best %s%s'\n",
		time.Since(start).Seconds(), cfg.Run.DB, cfg.Run.Name, db, cfg.Run.Name, db)
	return nil
}

// dbFlag is " --db PATH" for a command suggested to the user, or "" for
// the default store, which needs none.
func dbFlag(path string) string {
	if path == "" || path == config.Default().Run.DB {
		return ""
	}
	return " --db " + path
}

// leased is the refusal to play run name of store db that another
// process plays.
func (c *runCommand) leased(name, db string, err error) error {
	if db == "" {
		db = config.Default().Run.DB
	}
	return fmt.Errorf("run %s: %w; this process changed nothing. To play it here, stop it there first (daemon: POST /api/v1/runs/%s/cancel; CLI: Ctrl-C), then 'grpo run --resume %s --db %s'",
		name, err, url.PathEscape(name), name, db)
}

// runView shows a run's progress on stderr: a bar per step on a
// terminal, one line per committed step elsewhere; and run-level progress
// on each committed step's line (step k/N, time elapsed, seconds per step,
// the time left at that pace), in the bar's description too. Off a
// terminal (a log file) every line starts with the time of its event.
type runView struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
	bar   *progress
	step  int // the bar's step: with an asynchronous pipeline, later steps' episodes finish meanwhile
	tty   bool

	total   int       // the run's steps, from run_started
	started time.Time // when this process began playing the run
	trained int       // training steps committed since
	last    int       // the last step committed
}

func newRunView(w io.Writer, quiet bool) *runView {
	f, ok := w.(*os.File)
	return &runView{w: w, quiet: quiet, tty: ok && isTerminal(f)}
}

// println writes line, with the time t of its event in front when the
// output is not a terminal.
func (v *runView) println(t time.Time, line string) {
	if !v.tty {
		if t.IsZero() {
			t = time.Now()
		}
		line = t.Local().Format(timeFormat) + " " + line
	}
	fmt.Fprintln(v.w, line)
}

// pace is the run-level progress once step is committed at now: step k
// of N, the time since this process began playing, and with a training
// step committed since, seconds per step and the time left at that pace.
func pace(started, now time.Time, trained, step, total int) string {
	elapsed := now.Sub(started)
	s := fmt.Sprintf("%d/%d, %s elapsed", step, total, elapsed.Round(time.Second))
	if trained > 0 && step < total {
		per := elapsed / time.Duration(trained)
		s += fmt.Sprintf(", %.1f s/step, ETA %s", per.Seconds(), (per * time.Duration(total-step)).Round(time.Second))
	} else if trained > 0 {
		s += fmt.Sprintf(", %.1f s/step", (elapsed / time.Duration(trained)).Seconds())
	}
	return s
}

// barLabel is the description of step's bar: the step of the run's
// steps, and the time left at the pace so far.
func (v *runView) barLabel(step int) string {
	if v.total == 0 {
		return fmt.Sprintf("step %2d", step)
	}
	label := fmt.Sprintf("step %2d/%d", step, v.total)
	if v.trained > 0 && !v.started.IsZero() {
		per := time.Since(v.started) / time.Duration(v.trained)
		label += fmt.Sprintf(" ETA %s", (per * time.Duration(v.total-v.last)).Round(time.Second))
	}
	return label
}

func (v *runView) event(e orchestrator.Event) {
	if v.quiet {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case e.RunStarted != nil:
		// A view shows one run at a time (grpo experiment plays several
		// through one): the pace counts this run's steps only.
		v.total, v.started, v.last, v.trained = e.RunStarted.Steps, e.Time, e.RunStarted.From-1, 0
		if v.started.IsZero() {
			v.started = time.Now()
		}
		if e.RunStarted.Resumed {
			v.println(e.Time, fmt.Sprintf("resuming at step %d of %d (the steps before it are stored)", e.RunStarted.From, e.RunStarted.Steps))
		}
	case e.StepStarted != nil && e.StepStarted.Reattach:
		v.println(e.Time, fmt.Sprintf("step %2d: its trainer job was submitted before the restart; waiting for it", e.Step))
		if v.tty {
			v.bar = newProgress(v.w, -1, v.barLabel(e.Step))
			v.step = e.Step
		}
	case e.StepStarted != nil:
		if v.tty {
			total := e.StepStarted.Episodes + e.StepStarted.Validation
			if total == 0 {
				total = -1 // nothing to count (sampled ahead, not validated): a spinner
			}
			v.bar = newProgress(v.w, total, v.barLabel(e.Step))
			v.step = e.Step
		}
	case e.EpisodeFinished != nil:
		if v.bar != nil && e.Step == v.step {
			v.bar.Add(1)
		}
	case e.JobState != nil:
		if v.bar != nil {
			j := e.JobState
			v.bar.Describe(fmt.Sprintf("%s job %s %3.0f%%", v.barLabel(e.Step), j.State, 100*j.Progress))
		}
	case e.StepCommitted != nil:
		// With an asynchronous pipeline a step may commit after the next
		// one started (it validated while that one trained): the next
		// step's bar stays.
		if v.bar != nil && e.Step >= v.step {
			v.bar.Finish()
			v.bar = nil
		}
		if e.Step > 0 {
			v.trained++
		}
		v.last = e.Step
		s := e.StepCommitted
		line := fmt.Sprintf("step %2d committed", e.Step)
		if s.Train != nil {
			line += fmt.Sprintf("  train %.3f", s.Train.RewardMean)
		}
		if s.Job == nil && e.Step > 0 {
			line += "  (no signal: no job)"
		}
		if v.total > 0 {
			now := e.Time
			if now.IsZero() {
				now = time.Now()
			}
			line += "  [" + pace(v.started, now, v.trained, e.Step, v.total) + "]"
		}
		v.println(e.Time, line)
	case e.ValidationDone != nil:
		ev := e.ValidationDone
		v.println(e.Time, fmt.Sprintf("step %2d validation %.3f [%.3f, %.3f] deadlock %.2f", e.Step, ev.RewardMean, ev.RewardCI95[0], ev.RewardCI95[1], ev.DeadlockRate))
	case e.BestChanged != nil:
		v.println(e.Time, fmt.Sprintf("best step is now %d (%.3f)", e.BestChanged.Step, e.BestChanged.Value))
	case e.EndpointState != nil && e.EndpointState.Up:
		// A drain is already a warning of the run's log.
		v.println(e.Time, endpointLine(*e.EndpointState))
	case e.Warning != nil:
		// The run's warnings are on its log (Options.Logger) already.
	}
}

func (v *runView) finish() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.bar != nil {
		v.bar.Finish()
		v.bar = nil
	}
}

// maxRunNames is how many of a store's runs an unknown run's error names.
const maxRunNames = 5

// withRunNames adds to err, when it says store db has no such run, the
// runs it does have (the nearest name first when the name looks like a
// typo of one), so that a misspelt name or the wrong --db shows.
func withRunNames(ctx context.Context, db, name string, err error) error {
	if !errors.Is(err, checkpoint.ErrRunNotFound) || errors.Is(err, checkpoint.ErrNoDatabase) {
		return err
	}
	list, lerr := checkpoint.New(db, checkpoint.Options{}).ListRuns(ctx)
	if lerr != nil {
		return err
	}
	if len(list) == 0 {
		return fmt.Errorf("%w; the store %s has no runs", err, db)
	}
	names := make([]string, len(list))
	for i, r := range list {
		names[i] = r.Name
	}
	hint := ""
	if near := config.Nearest(name, names); near != "" {
		hint = fmt.Sprintf(" (did you mean %s?)", near)
		names = append([]string{near}, slices.DeleteFunc(names, func(n string) bool { return n == near })...)
	}
	shown := strings.Join(names[:min(len(names), maxRunNames)], ", ")
	if more := len(names) - maxRunNames; more > 0 {
		shown += fmt.Sprintf(" and %d more ('grpo runs%s' lists them)", more, dbFlag(db))
	}
	return fmt.Errorf("%w%s; the store %s has %s: %s", err, hint, db, plural(len(names), "run"), shown)
}

// report is a run read back from the store.
type report struct {
	run   checkpoint.Run
	steps []checkpoint.Step
	evals map[int]checkpoint.Evaluation
	sel   *checkpoint.Selection

	evalList []checkpoint.Evaluation
	tests    []checkpoint.TestEvaluation // stored measurements on the test split
	// noValidationCompare drops the best-vs-last and best-vs-base lines
	// on validation: the test split reports them instead.
	noValidationCompare bool
	// underway, when set (grpo runs show), has what the run has under
	// way and its lease, printed after the steps; db is its store.
	underway *checkpoint.RunView
	db       string
}

func loadReport(ctx context.Context, store *checkpoint.Store, name string) (*report, error) {
	run, steps, evals, err := store.Snapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	r := &report{run: run, steps: steps, evals: map[int]checkpoint.Evaluation{}, evalList: evals}
	if r.tests, err = store.TestEvaluations(ctx, name, checkpoint.SplitTest); err != nil {
		return nil, err
	}
	for _, ev := range evals {
		r.evals[ev.Step] = ev
	}
	if sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals); err == nil {
		r.sel = &sel
	}
	return r, nil
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nrun %s (%s): selection %s on %s\n", r.run.Name, r.stateLabel(), r.run.Policy, r.run.Metric)
	if r.run.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.run.Error)
	}
	tw := newTable(w)
	ns := r.validationSizes()
	hdr := "STEP\tN\tTRAIN\tVALIDATION\t95% CI\tDEADLOCK\tMEALS\t"
	for _, n := range ns {
		hdr += fmt.Sprintf("VAL n=%d\t", n)
	}
	fmt.Fprintln(tw, hdr+"JOB\tADAPTER\t")
	for _, s := range r.steps {
		train, job := "-", "-"
		if s.Train != nil {
			train = fmt.Sprintf("%.3f", s.Train.RewardMean)
		}
		if s.Job != nil {
			job = s.Job.State
		} else if s.Step > 0 {
			job = "no signal"
		}
		val, ci, dl, meals := "-", "", "-", "-"
		perN := make([]string, len(ns))
		for i := range perN {
			perN[i] = "-"
		}
		if ev, ok := r.evals[s.Step]; ok {
			val = fmt.Sprintf("%.3f", ev.RewardMean)
			ci = fmt.Sprintf("[%.3f, %.3f]", ev.RewardCI95[0], ev.RewardCI95[1])
			dl, meals = fmt.Sprintf("%.2f", ev.DeadlockRate), fmt.Sprintf("%.2f", ev.MealsMean)
			for _, p := range ev.PerN {
				if i := slices.Index(ns, p.N); i >= 0 {
					perN[i] = fmt.Sprintf("%.3f", p.RewardMean)
				}
			}
		}
		mark := ""
		if r.sel != nil && r.sel.Step == s.Step {
			mark = "<- best"
		}
		cols := ""
		for _, c := range perN {
			cols += c + "\t"
		}
		// Whether the step's adapter can still be exported or promoted
		// from this machine.
		disk := "-"
		if s.Adapter != nil {
			disk = "missing"
			if promote.OnDisk(s.Adapter) {
				disk = "on disk"
			}
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s%s\t%s\t%s\n", s.Step, s.N, train, val, ci, dl, meals, cols, job, disk, mark)
	}
	tw.Flush()
	r.printUnderway(w)
	if r.sel == nil || len(r.steps) == 0 {
		return
	}
	if r.noValidationCompare {
		return
	}
	if len(r.tests) > 0 {
		fmt.Fprintln(w, "measured on the test split (grpo eval --run):")
		tw := newTable(w)
		fmt.Fprintln(tw, "STEP\tN\tEPISODES\tREWARD\tDEADLOCK\tMEALS\tINVALID\t")
		for _, te := range r.tests {
			for _, p := range te.Evaluation.PerN {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%.3f\t%.2f\t%.2f\t%.3f\t\n", te.Evaluation.Step, p.N, p.Episodes, p.RewardMean, p.DeadlockRate, p.MealsMean, p.InvalidRate)
			}
		}
		tw.Flush()
	}
	best, okB := r.evals[r.sel.Step]
	last, okL := r.evals[r.steps[len(r.steps)-1].Step]
	base, ok0 := r.evals[0]
	if okB && okL {
		fmt.Fprintln(w, compareLine("best", best, "last", last))
	}
	if okB && ok0 {
		fmt.Fprintln(w, compareLine("best", best, "base", base))
	}
	if okB && (okL || ok0) && r.run.Policy == checkpoint.PolicyBestValidation {
		fmt.Fprintf(w, "(selection-biased: the best step was chosen on these validation episodes, so they overstate it; measure it on the test split with 'grpo eval --db DB --run %s --step best,last,base')\n", r.run.Name)
	}
}

// timeFormat is how runs show prints a time: local, to the second.
const timeFormat = "2006-01-02 15:04:05"

// stateLabel is the run's state, and for a running run that no live
// process plays (its lease), its last sign of life.
func (r *report) stateLabel() string {
	u := r.underway
	if u == nil || r.run.State != checkpoint.StateRunning {
		return r.run.State
	}
	switch {
	case u.Lease == nil:
		return r.run.State + ", no process is playing it"
	case !u.Lease.Live:
		return r.run.State + ", no live process: last heartbeat " + u.Lease.Heartbeat.Local().Format(timeFormat)
	}
	return r.run.State
}

// printUnderway says which step is being validated and which step's
// trainer job is in flight, and how to resume a running run that no
// process plays (then they are what it left when it stopped).
func (r *report) printUnderway(w io.Writer) {
	u := r.underway
	if u == nil {
		return
	}
	live := u.Lease != nil && u.Lease.Live
	if s := u.Validating; s != nil && live {
		fmt.Fprintf(w, "step %d: being validated, not committed yet\n", *s)
	} else if s != nil {
		fmt.Fprintf(w, "step %d: was being validated when the run stopped, not committed\n", *s)
	}
	if j := u.InFlight; j != nil {
		submitted := j.Submitted.Local().Format(timeFormat)
		switch {
		case !live:
			fmt.Fprintf(w, "step %d: trainer job %s submitted %s, not committed (a resume waits for that job)\n", j.Step, j.JobID, submitted)
		case u.Validating != nil:
			fmt.Fprintf(w, "step %d: trainer job %s in flight, submitted %s\n", j.Step, j.JobID, submitted)
		default:
			fmt.Fprintf(w, "step %d: trainer job %s in flight, submitted %s (training, or trained and being validated)\n", j.Step, j.JobID, submitted)
		}
	}
	if r.run.State != checkpoint.StateRunning || live {
		return
	}
	who := "no process holds its lease"
	if l := u.Lease; l != nil {
		who = fmt.Sprintf("its process (pid %d on %s) no longer renews its lease (last heartbeat %s)", l.PID, l.Host, l.Heartbeat.Local().Format(timeFormat))
	}
	fmt.Fprintf(w, "not playing: %s; resume it with 'grpo run --resume %s%s', or a daemon started on this store resumes it\n", who, r.run.Name, dbFlag(r.db))
}

// validationSizes are the table sizes of the run's validations, one
// column each, when there are several or one differs from a step's
// training size (VALIDATION alone would read as measured at N); else none.
func (r *report) validationSizes() []int {
	var ns []int
	for _, ev := range r.evalList {
		for _, p := range ev.PerN {
			if !slices.Contains(ns, p.N) {
				ns = append(ns, p.N)
			}
		}
	}
	differs := false
	for _, s := range r.steps {
		if len(ns) == 1 && s.N != ns[0] {
			differs = true
		}
	}
	if len(ns) < 2 && !differs {
		return nil
	}
	slices.Sort(ns)
	return ns
}

// compareLine compares two validations: means, 95% CIs, and the p of a
// paired t-test over the tables both played (every validation plays the
// same tables), or Welch's when their episodes were not kept.
func compareLine(an string, a checkpoint.Evaluation, bn string, b checkpoint.Evaluation) string {
	head := fmt.Sprintf("%s step %d: %.3f [%.3f, %.3f] vs %s step %d: %.3f [%.3f, %.3f]; ",
		an, a.Step, a.RewardMean, a.RewardCI95[0], a.RewardCI95[1], bn, b.Step, b.RewardMean, b.RewardCI95[0], b.RewardCI95[1])
	if x, y := sharedTables(a.Records, b.Records); len(x) >= 2 {
		if pr, err := grpo.Paired(y, x); err == nil { // mean(x - y)
			return head + fmt.Sprintf("difference %+.3f, paired p = %.3g over %d tables", pr.Diff, pr.P, pr.N)
		}
	}
	w := grpo.Welch(b.Rewards, a.Rewards)
	return head + fmt.Sprintf("difference %+.3f, Welch p = %.3g", w.Diff, w.P)
}

// sharedTables are the rewards of a's and b's episodes on the tables (n,
// seed) both scored, in a's order.
func sharedTables(a, b []checkpoint.EpisodeRecord) (x, y []float64) {
	type table struct {
		n    int
		seed int64
	}
	other := make(map[table]float64, len(b))
	for _, e := range b {
		if !e.Errored {
			other[table{e.N, e.Seed}] = e.Reward
		}
	}
	for _, e := range a {
		if v, ok := other[table{e.N, e.Seed}]; ok && !e.Errored {
			x, y = append(x, e.Reward), append(y, v)
		}
	}
	return x, y
}

// printTest measures the best, last and base checkpoints on the config's
// test split and compares them table by table (paired t, Holm across the
// comparisons printed, paired Hedges' g).
func (r *report) printTest(ctx context.Context, m *Main, cfg config.Config) error {
	picks, err := r.choose([]string{"best", "last", "base"})
	if err != nil {
		return err
	}
	t := cfg.Test
	keep, err := testStorer(ctx, m.Stderr, checkpoint.New(cfg.Run.DB, checkpoint.Options{}), r.run.Name, t.Seed)
	if err != nil {
		return err
	}
	results, done, err := testCheckpoints(ctx, m.Getenv, m.Stderr, cfg, picks, t.N, t.Episodes,
		evalOptions{concurrency: cfg.Inference.Concurrency, timeout: time.Duration(cfg.Inference.RequestTimeout), retries: cfg.Inference.Retries, retryBudget: time.Duration(cfg.Inference.RetryBudget), outage: time.Duration(cfg.Inference.OutageWindow)}, keep)
	if err != nil {
		return err
	}
	fmt.Fprintf(m.Stdout, "test split: %d tables per n from seed %d, never used for training or selection\n", t.Episodes, t.Seed)
	tw := newTable(m.Stdout)
	fmt.Fprintln(tw, "N\tCHECKPOINT\tREWARD\t95% CI\tDEADLOCK\tMEALS\tINVALID\t")
	for _, n := range t.N {
		for _, res := range results {
			if res.N == n {
				fmt.Fprintf(tw, "%d\t%s step %d\t%.3f\t[%.3f, %.3f]\t%.2f\t%.2f\t%.3f\t\n", n, res.SelectedBy, *res.Step,
					res.Reward.Mean, res.Reward.CI95[0], res.Reward.CI95[1], res.DeadlockRate, res.MealsMean, res.InvalidRate)
			}
		}
	}
	tw.Flush()
	type cmp struct {
		label string
		pr    grpo.PairedResult
		g     float64
	}
	var cs []cmp
	best, last := picks[0], picks[1]
	for _, n := range t.N {
		for _, other := range []pick{last, picks[2]} {
			if other.step == best.step {
				continue
			}
			a, b := testPairs(done[other.step], done[best.step], n)
			pr, err := grpo.Paired(a, b)
			if err != nil {
				return err
			}
			g, err := grpo.PairedHedgesG(a, b)
			if err != nil {
				return err
			}
			cs = append(cs, cmp{fmt.Sprintf("best step %d vs %s step %d at n=%d", best.step, other.selectedBy, other.step, n), pr, g})
		}
	}
	ps := make([]float64, len(cs))
	for i, c := range cs {
		ps[i] = c.pr.P
	}
	for i, ph := range grpo.Holm(ps) {
		c := cs[i]
		fmt.Fprintf(m.Stdout, "%s: difference %+.3f [%.3f, %.3f] over %d tables, paired p = %.3g, Holm p = %.3g, Hedges' g %+.2f\n",
			c.label, c.pr.Diff, c.pr.CI95[0], c.pr.CI95[1], c.pr.N, c.pr.P, ph, c.g)
	}
	if best.step == last.step {
		fmt.Fprintf(m.Stdout, "the best step is the last step (%d)\n", best.step)
	}
	return nil
}

// testPairs are the rewards of a and b at size n on the tables both
// scored, in table order (both played evaluate.TestSet's tables).
func testPairs(a, b evaluate.Result, n int) (ra, rb []float64) {
	ea, eb := a.Episodes, b.Episodes
	for i := range min(len(ea), len(eb)) {
		x, y := ea[i], eb[i]
		if x.Spec.Env.N != n || x.Errored || y.Errored || x.Spec.Env.Seed != y.Spec.Env.Seed {
			continue
		}
		ra, rb = append(ra, x.Reward), append(rb, y.Reward)
	}
	return ra, rb
}
