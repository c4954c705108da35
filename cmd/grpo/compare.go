package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

const compareSynopsis = `Usage: grpo compare RUN_A RUN_B --db DB [--step best|last|base|N] [--n 5,10] [--episodes K] [--json]
       grpo compare [--paired] [--json] A.jsonl B.jsonl

Each argument is a file when a file of that path exists, else a run name.

Two runs (in the store --db): evaluates each run's chosen checkpoint
(--step, default best: the step its selection policy chose) on the same
test tables, those of RUN_A's test section (the seeds, table sizes and
episodes of 'grpo eval --run'; --n and --episodes override them; RUN_B
plays RUN_A's seeds), and compares them table by table at each n, B - A:
reward, deadlock rate, meals (per episode) and invalid rate (invalid
outputs per LLM call), each with a paired t-test on the per-table
differences, its t interval, a percentile bootstrap 95% CI, the paired
Hedges' g, and Holm's correction across every comparison printed. Runs
scored by different reward functions (or weights) are not compared on
reward, whose scales differ (a paper reward is not on the shaped scale):
compare says so and compares the other three. A checkpoint's test
measurement is stored with its run as 'grpo eval --run' stores it, and one
already stored on the same tables is reused. Each run plays by its own
env rules (rounds, mode, deadlock patience); when they differ compare
says so.

Two files ('grpo eval --out'): compares them per table size n: mean reward of A and
of B, the difference B - A with its 95% CI (Welch), Welch's t-test p-value
(two-sided) and Hedges' g (B vs A, pooled standard deviation). Errored
episodes are left out. A table size with scored episodes in only one file
cannot be compared: compare names it on stderr (and under "unmatched" with
--json).

--paired: both files played the same tables (same seeds, as every model of
one 'grpo eval' and every checkpoint of 'grpo eval --run' do); compare table
by table: a paired t-test on the per-table differences B - A, with its t
interval and a percentile bootstrap 95% CI; Hedges' g is then the paired
one (still the pooled standard deviation of A and B, its small-sample
correction on the degrees of freedom of correlated pairs). Only tables scored on both
sides count; how many tables each file had alone is said on stderr (and
as only_a, only_b with --json).

With several table sizes the p-values are also Holm-corrected across them
(P HOLM), since they are reported together. A size with one episode on a
side (one pair with --paired) has no test: its CI, p and g read "-" (df 0
and p 1 with --json) and it is not counted in the others' Holm correction.
`

type comparison struct {
	N       int        `json:"n"`
	ModelA  string     `json:"model_a"`
	ModelB  string     `json:"model_b"`
	A       rewardJSON `json:"a"`
	B       rewardJSON `json:"b"`
	NA      int        `json:"episodes_a"`
	NB      int        `json:"episodes_b"`
	Diff    float64    `json:"diff"`
	DiffCI  [2]float64 `json:"diff_ci95"`
	T       float64    `json:"t"`
	DF      float64    `json:"df"`
	P       float64    `json:"p"`
	PHolm   float64    `json:"p_holm"` // Holm-corrected across the comparisons printed together
	HedgesG float64    `json:"hedges_g"`
	Test    string     `json:"test"`             // welch | paired-t
	Metric  string     `json:"metric,omitempty"` // runs: reward | deadlock_rate | meals | invalid_rate
	Pairs   int        `json:"pairs,omitempty"`  // paired-t: tables scored on both sides
	// OnlyA and OnlyB (paired-t) are the tables scored in one file only,
	// left out of the pairing.
	OnlyA  int         `json:"only_a,omitempty"`
	OnlyB  int         `json:"only_b,omitempty"`
	Boot95 *[2]float64 `json:"boot_ci95,omitempty"` // paired-t only: bootstrap 95% CI of diff
}

// unmatchedN is a table size with scored episodes in only one file.
type unmatchedN struct {
	N        int    `json:"n"`
	File     string `json:"file"`
	Episodes int    `json:"episodes"`
}

type compareJSON struct {
	Comparisons []comparison `json:"comparisons"`
	Unmatched   []unmatchedN `json:"unmatched"`
	// Runs and RewardNotCompared are the two-runs form's: the checkpoints
	// compared, and why reward is not among the metrics, when it is not.
	Runs              []compareRunJSON `json:"runs,omitempty"`
	RewardNotCompared string           `json:"reward_not_compared,omitempty"`
}

// CompareCommand is `grpo compare`.
type CompareCommand struct {
	*Main
	json         bool
	paired       bool
	pathA, pathB string
	// The two-runs form's flags.
	db       string
	step     string
	ns       []int
	episodes int
	set      map[string]bool // the flags given
}

// ParseFlags parses the command line of `grpo compare`.
func (c *CompareCommand) ParseFlags(args []string) error {
	fs := c.newFlags("compare", compareSynopsis)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&c.paired, "paired", false, "files: pair episodes by table (seed): paired t-test with a bootstrap CI (runs are always paired)")
	fs.StringVar(&c.db, "db", "", "runs: the store holding RUN_A and RUN_B")
	fs.StringVar(&c.step, "step", "best", "runs: the checkpoint of each run: best, last, base or a step number")
	nList := fs.String("n", "", "runs: table sizes, e.g. 5,10 (default: RUN_A's test.n, else the sizes it trains at)")
	fs.IntVar(&c.episodes, "episodes", 0, "runs: test tables per n (default: RUN_A's test.episodes)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want two files (A.jsonl B.jsonl) or two runs (RUN_A RUN_B --db DB); got %d argument(s)", fs.NArg())
	}
	c.pathA, c.pathB = fs.Arg(0), fs.Arg(1)
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	switch c.step {
	case "best", "last", "base":
	default:
		if n, err := strconv.Atoi(c.step); err != nil || n < 0 {
			return usagef("--step %q: want best, last, base or a step number", c.step)
		}
	}
	if c.set["n"] {
		ns, err := parseInts("n", *nList)
		if err != nil {
			return err
		}
		for _, n := range ns {
			if n < 2 {
				return usagef("--n %d: need at least 2 philosophers", n)
			}
		}
		c.ns = ns
	}
	if c.set["episodes"] && c.episodes < 1 {
		return usagef("--episodes %d: need at least 1", c.episodes)
	}
	return nil
}

// isFile reports whether path names a file (not a directory): compare's
// arguments are files when they are, run names otherwise.
func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir()
}

// Run compares two runs' checkpoints, or two files, per table size and
// prints the comparisons.
func (c *CompareCommand) Run(ctx context.Context) error {
	fileA, fileB := isFile(c.pathA), isFile(c.pathB)
	switch {
	case !fileA && !fileB:
		return c.compareRuns(ctx)
	case fileA != fileB:
		file, other := c.pathA, c.pathB
		if fileB {
			file, other = c.pathB, c.pathA
		}
		return usagef("%s is a file but %s is not: compare takes two files ('grpo eval --out') or two run names (with --db)", file, other)
	}
	for _, name := range []string{"db", "step", "n", "episodes"} {
		if c.set[name] {
			return usagef("--%s is for comparing two runs, but %s and %s are files ('grpo eval --out' records, compared as they are)", name, c.pathA, c.pathB)
		}
	}
	a, err := readEpisodes(c.pathA)
	if err != nil {
		return err
	}
	b, err := readEpisodes(c.pathB)
	if err != nil {
		return err
	}
	if c.paired {
		for _, f := range []episodeFile{a, b} {
			if f.dupSeed != "" {
				return fmt.Errorf("--paired: %s; pairing needs one episode per table", f.dupSeed)
			}
		}
	}
	var out []comparison
	var unmatched []unmatchedN
	for _, n := range sortedKeys(b.rewards) {
		if _, ok := a.rewards[n]; !ok {
			unmatched = append(unmatched, unmatchedN{N: n, File: c.pathB, Episodes: len(b.rewards[n])})
		}
	}
	for _, n := range sortedKeys(a.rewards) {
		rb, ok := b.rewards[n]
		if !ok {
			unmatched = append(unmatched, unmatchedN{N: n, File: c.pathA, Episodes: len(a.rewards[n])})
			continue
		}
		ra := a.rewards[n]
		onlyA, onlyB := 0, 0
		if c.paired {
			ra, rb = pairs(a.bySeed[n], b.bySeed[n])
			onlyA, onlyB = len(a.bySeed[n])-len(ra), len(b.bySeed[n])-len(rb)
			if onlyA > 0 || onlyB > 0 {
				fmt.Fprintf(c.Stderr, "grpo compare: n=%d: %d table(s) scored in both files are paired; %d only in %s and %d only in %s are left out\n",
					n, len(ra), onlyA, c.pathA, onlyB, c.pathB)
			}
			if len(ra) == 0 {
				continue
			}
		}
		sa, sb := grpo.Summarize(ra), grpo.Summarize(rb)
		cmp := comparison{
			N: n, ModelA: a.model, ModelB: b.model,
			A: rewardJSON{sa.Mean, sa.Std, sa.CI95}, B: rewardJSON{sb.Mean, sb.Std, sb.CI95},
			NA: len(ra), NB: len(rb), HedgesG: grpo.HedgesG(ra, rb), Test: "welch",
		}
		if c.paired {
			if err := cmp.pair(ra, rb); err != nil {
				return err
			}
			cmp.OnlyA, cmp.OnlyB = onlyA, onlyB
		} else {
			w := grpo.Welch(ra, rb)
			cmp.Diff, cmp.DiffCI, cmp.T, cmp.DF, cmp.P = w.Diff, w.CI95, w.T, w.DF, w.P
		}
		out = append(out, cmp)
	}
	if c.paired && len(out) == 0 {
		return fmt.Errorf("--paired: %s and %s share no table (same n and seed) scored on both sides; were they played with the same --seed?", c.pathA, c.pathB)
	}
	holm(out)
	slices.SortFunc(unmatched, func(x, y unmatchedN) int { return x.N - y.N })
	for _, u := range unmatched {
		fmt.Fprintf(c.Stderr, "grpo compare: n=%d has %d scored episode(s) only in %s; not compared\n", u.N, u.Episodes, u.File)
	}
	if len(out) == 0 {
		return fmt.Errorf("%s and %s share no table size n with scored episodes", c.pathA, c.pathB)
	}
	if c.json {
		if unmatched == nil {
			unmatched = []unmatchedN{}
		}
		return json.NewEncoder(c.Stdout).Encode(compareJSON{Comparisons: out, Unmatched: unmatched})
	}
	printComparisons(c.Stdout, out)
	return nil
}

// pair fills c's test from the paired values ra, rb (table by table):
// the paired t-test on the differences rb - ra, its bootstrap CI and the
// paired Hedges' g.
func (c *comparison) pair(ra, rb []float64) error {
	pr, err := grpo.Paired(ra, rb)
	if err != nil {
		return err
	}
	if c.HedgesG, err = grpo.PairedHedgesG(ra, rb); err != nil {
		return err
	}
	c.Test, c.Pairs, c.Diff, c.DiffCI, c.Boot95, c.T, c.DF, c.P = "paired-t", pr.N, pr.Diff, pr.CI95, &pr.Boot95, pr.T, pr.DF, pr.P
	return nil
}

// holm sets each comparison's PHolm, Holm-corrected across those that
// were tested: a side with one episode (one pair) gives no test, and its
// p of 1 would raise the others'.
func holm(cs []comparison) {
	var tested []*comparison
	var ps []float64
	for i := range cs {
		if c := &cs[i]; c.DF > 0 {
			tested, ps = append(tested, c), append(ps, c.P)
		} else {
			c.PHolm = 1
		}
	}
	for i, p := range grpo.Holm(ps) {
		tested[i].PHolm = p
	}
}

func printComparisons(w io.Writer, cs []comparison) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	paired := len(cs) > 0 && cs[0].Test == "paired-t"
	metric := len(cs) > 0 && cs[0].Metric != ""
	hdr := "N\tA\tB\tB-A\t95% CI\tWELCH P\t"
	if paired {
		hdr = "N\tA\tB\tB-A\t95% CI\tBOOTSTRAP CI\tPAIRED P\t"
	}
	if metric {
		hdr = strings.Replace(hdr, "N\t", "N\tMETRIC\t", 1)
	}
	if len(cs) > 1 {
		hdr += "P HOLM\t"
	}
	fmt.Fprintln(tw, hdr+"HEDGES G")
	for _, c := range cs {
		line := fmt.Sprintf("%d\t%.3f (%d)\t%.3f (%d)\t%+.3f\t", c.N, c.A.Mean, c.NA, c.B.Mean, c.NB, c.Diff)
		if metric {
			line = fmt.Sprintf("%d\t%s\t%.3f (%d)\t%.3f (%d)\t%+.3f\t", c.N, c.Metric, c.A.Mean, c.NA, c.B.Mean, c.NB, c.Diff)
		}
		if c.DF == 0 {
			// A side with one episode (one pair) has no variance estimate:
			// no interval, no test, no effect size (the JSON holds [diff,
			// diff] and p 1). Print none rather than a certain difference.
			dashes := 3 // 95% CI, P, HEDGES G
			if paired {
				dashes++ // BOOTSTRAP CI
			}
			if len(cs) > 1 {
				dashes++ // P HOLM
			}
			fmt.Fprintln(tw, line+strings.TrimSuffix(strings.Repeat("-\t", dashes), "\t"))
			continue
		}
		line += fmt.Sprintf("[%.3f, %.3f]\t", c.DiffCI[0], c.DiffCI[1])
		if paired {
			line += fmt.Sprintf("[%.3f, %.3f]\t", c.Boot95[0], c.Boot95[1])
		}
		line += fmt.Sprintf("%.3g\t", c.P)
		if len(cs) > 1 {
			line += fmt.Sprintf("%.3g\t", c.PHolm)
		}
		fmt.Fprintf(tw, "%s%+.2f\n", line, c.HedgesG)
	}
	tw.Flush()
	if len(cs) > 0 {
		note := "(k) = scored episodes"
		if paired {
			note = "(k) = tables scored on both sides, compared table by table"
		}
		fmt.Fprintf(w, "A = %s, B = %s; %s.\n", cs[0].ModelA, cs[0].ModelB, note)
	}
}

// pairs returns the rewards of the tables scored in both a and b, in
// seed order.
func pairs(a, b map[int64]float64) (ra, rb []float64) {
	seeds := make([]int64, 0, len(a))
	for s := range a {
		if _, ok := b[s]; ok {
			seeds = append(seeds, s)
		}
	}
	slices.Sort(seeds)
	for _, s := range seeds {
		ra, rb = append(ra, a[s]), append(rb, b[s])
	}
	return ra, rb
}

type episodeFile struct {
	model   string
	rewards map[int][]float64
	bySeed  map[int]map[int64]float64 // n -> table seed -> reward
	dupSeed string                    // set when a table was played twice: --paired cannot pair it
}

// readEpisodes reads an eval --out file: one rollout.Episode per line.
func readEpisodes(path string) (episodeFile, error) {
	ef := episodeFile{rewards: map[int][]float64{}, bySeed: map[int]map[int64]float64{}}
	f, err := os.Open(path)
	if err != nil {
		return ef, fmt.Errorf("open episodes file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var ep rollout.Episode
		if err := json.Unmarshal(sc.Bytes(), &ep); err != nil {
			return ef, fmt.Errorf("%s:%d: not an episode record from 'grpo eval --out': %v", path, line, err)
		}
		if ep.Spec.Env.N == 0 {
			return ef, fmt.Errorf("%s:%d: record has no spec.env.n; is this a 'grpo eval --out' file?", path, line)
		}
		switch {
		case ef.model == "":
			ef.model = ep.Spec.Model
		case ef.model != ep.Spec.Model:
			return ef, fmt.Errorf("%s holds episodes of two models (%s, %s); compare takes one model per file", path, ef.model, ep.Spec.Model)
		}
		if !ep.Errored {
			n, seed := ep.Spec.Env.N, ep.Spec.Env.Seed
			ef.rewards[n] = append(ef.rewards[n], ep.Reward)
			if ef.bySeed[n] == nil {
				ef.bySeed[n] = map[int64]float64{}
			}
			if _, dup := ef.bySeed[n][seed]; dup {
				ef.dupSeed = fmt.Sprintf("%s:%d: a second episode on table n=%d seed %d", path, line, n, seed)
			}
			ef.bySeed[n][seed] = ep.Reward
		}
	}
	if err := sc.Err(); err != nil {
		return ef, fmt.Errorf("read %s: %w", path, err)
	}
	if line == 0 {
		return ef, fmt.Errorf("%s is empty", path)
	}
	return ef, nil
}

func sortedKeys(m map[int][]float64) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// compareRunJSON is one side of a two-runs comparison.
type compareRunJSON struct {
	Run            string `json:"run"`
	Step           int    `json:"step"`
	SelectedBy     string `json:"selected_by"` // best, last, base or step
	RewardFunction string `json:"reward_function"`
}

// runSide is one run's checkpoint to compare.
type runSide struct {
	name string
	cfg  config.Config
	pick pick
	rep  *report
}

// label names the checkpoint as 'grpo eval --run' does: RUN@STEP.
func (s runSide) label() string {
	return fmt.Sprintf("%s@%d (%s)", s.name, s.pick.step, s.pick.selectedBy)
}

// runMetrics are what two runs are compared on, each a per-table value of
// an episode record.
var runMetrics = []struct {
	name string
	of   func(checkpoint.EpisodeRecord) float64
}{
	{"reward", func(r checkpoint.EpisodeRecord) float64 { return r.Reward }},
	{"deadlock_rate", func(r checkpoint.EpisodeRecord) float64 {
		if r.Deadlock {
			return 1
		}
		return 0
	}},
	{"meals", func(r checkpoint.EpisodeRecord) float64 { return float64(r.Meals) }},
	{"invalid_rate", func(r checkpoint.EpisodeRecord) float64 {
		if r.Calls == 0 {
			return 0
		}
		return float64(r.Invalid) / float64(r.Calls)
	}},
}

// compareRuns is `grpo compare RUN_A RUN_B --db DB`: both runs' chosen
// checkpoints on RUN_A's test tables, compared table by table.
func (c *CompareCommand) compareRuns(ctx context.Context) error {
	if c.db == "" {
		return usagef("no file %s or %s: to compare two runs, name their store with --db DB (to compare 'grpo eval --out' files, give paths that exist)", c.pathA, c.pathB)
	}
	if c.set["paired"] {
		fmt.Fprintln(c.Stderr, "grpo compare: two runs are always compared table by table; --paired changes nothing")
	}
	if _, err := os.Stat(c.db); err != nil {
		return fmt.Errorf("open store %s: %w", c.db, err)
	}
	store := checkpoint.New(c.db, checkpoint.Options{})
	// The measurements are written into the store: not into a damaged one.
	if err := store.Check(ctx); err != nil {
		return err
	}
	var sides [2]runSide
	for i, name := range []string{c.pathA, c.pathB} {
		rep, err := loadReport(ctx, store, name)
		if err != nil {
			return err
		}
		cfg, err := config.FromJSON(rep.run.Config)
		if err != nil {
			return fmt.Errorf("run %s: read its stored config: %w", name, err)
		}
		picks, err := rep.choose([]string{c.step})
		if err != nil {
			return err
		}
		sides[i] = runSide{name: name, cfg: cfg, pick: picks[0], rep: rep}
	}
	a, b := &sides[0], &sides[1]
	ns, episodes := c.ns, c.episodes
	if ns == nil {
		ns = a.cfg.TestSizes()
	}
	if episodes == 0 {
		episodes = a.cfg.Test.Episodes
	}
	if b.cfg.Test.Seed != a.cfg.Test.Seed {
		fmt.Fprintf(c.Stderr, "grpo compare: run %s's test tables start at seed %d; it plays run %s's (from seed %d), so that the two are compared table by table\n",
			b.name, b.cfg.Test.Seed, a.name, a.cfg.Test.Seed)
		b.cfg.Test.Seed = a.cfg.Test.Seed
	}
	// Each run plays by its own rules: with other rules the same seeds are
	// not the same tables, and the differences are the rules' as much as
	// the checkpoints'.
	if ea, eb := a.cfg.Env, b.cfg.Env; ea.Rounds != eb.Rounds || ea.Mode != eb.Mode || ea.DeadlockPatience != eb.DeadlockPatience {
		fmt.Fprintf(c.Stderr, "grpo compare: note: the runs play by other rules (%s: %d rounds, %s, deadlock patience %d; %s: %d rounds, %s, deadlock patience %d): each plays by its own\n",
			a.name, ea.Rounds, ea.Mode, ea.DeadlockPatience, b.name, eb.Rounds, eb.Mode, eb.DeadlockPatience)
	}
	var records [2][]checkpoint.EpisodeRecord
	for i := range sides {
		var err error
		if records[i], err = c.testRecords(ctx, store, sides[i], ns, episodes); err != nil {
			return err
		}
	}

	metrics := runMetrics
	var notCompared string
	if a.cfg.Reward != b.cfg.Reward {
		notCompared = fmt.Sprintf("run %s is scored by %s and run %s by %s: their rewards are on different scales; compared on deadlock rate, meals and invalid rate",
			a.name, rewardName(a.cfg.Reward), b.name, rewardName(b.cfg.Reward))
		if c.json {
			fmt.Fprintf(c.Stderr, "grpo compare: reward not compared: %s\n", notCompared)
		}
		metrics = metrics[1:]
	}
	var out []comparison
	for _, n := range ns {
		for _, m := range metrics {
			va, vb := tableValues(records[0], n, m.of), tableValues(records[1], n, m.of)
			ra, rb := pairs(va, vb)
			if len(ra) == 0 {
				continue
			}
			sa, sb := grpo.Summarize(ra), grpo.Summarize(rb)
			cmp := comparison{N: n, Metric: m.name, ModelA: a.label(), ModelB: b.label(),
				A: rewardJSON{sa.Mean, sa.Std, sa.CI95}, B: rewardJSON{sb.Mean, sb.Std, sb.CI95}, NA: len(ra), NB: len(rb),
				OnlyA: len(va) - len(ra), OnlyB: len(vb) - len(rb)}
			if err := cmp.pair(ra, rb); err != nil {
				return err
			}
			out = append(out, cmp)
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("runs %s and %s share no test table scored on both sides (every episode errored on one side)", a.name, b.name)
	}
	holm(out)
	if c.json {
		runs := []compareRunJSON{}
		for _, s := range sides {
			runs = append(runs, compareRunJSON{Run: s.name, Step: s.pick.step, SelectedBy: s.pick.selectedBy, RewardFunction: string(s.cfg.Reward.Function)})
		}
		return json.NewEncoder(c.Stdout).Encode(compareJSON{Comparisons: out, Unmatched: []unmatchedN{}, Runs: runs, RewardNotCompared: notCompared})
	}
	fmt.Fprintf(c.Stdout, "test split: %d tables per n from seed %d, played by both checkpoints and compared table by table\n", episodes, a.cfg.Test.Seed)
	if notCompared != "" {
		fmt.Fprintf(c.Stdout, "reward not compared: %s\n", notCompared)
	}
	printComparisons(c.Stdout, out)
	return nil
}

// rewardName names a reward function with its weights.
func rewardName(r config.Reward) string {
	w := r.Weights
	return fmt.Sprintf("the %s reward (alpha %g, beta %g, gamma %g, delta %g)", r.Function, w.Alpha, w.Beta, w.Gamma, w.Delta)
}

// tableValues is metric of each scored episode at table size n, by table
// seed.
func tableValues(records []checkpoint.EpisodeRecord, n int, metric func(checkpoint.EpisodeRecord) float64) map[int64]float64 {
	out := map[int64]float64{}
	for _, r := range records {
		if r.N == n && !r.Errored {
			out[r.Seed] = metric(r)
		}
	}
	return out
}

// testRecords returns the episodes of side's checkpoint on its test
// tables (ns x episodes from side.cfg.Test.Seed): the stored measurement
// when one was taken on exactly those tables, else a new one, measured as
// 'grpo eval --run' measures and stored with the run.
func (c *CompareCommand) testRecords(ctx context.Context, store *checkpoint.Store, side runSide, ns []int, episodes int) ([]checkpoint.EpisodeRecord, error) {
	seed, step := side.cfg.Test.Seed, side.pick.step
	for _, te := range side.rep.tests {
		if te.Seed == seed && te.Evaluation.Step == step && sameSplit(te.Evaluation, ns, episodes) {
			fmt.Fprintf(c.Stderr, "grpo compare: run %s step %d: its stored test measurement on these tables is reused\n", side.name, step)
			return te.Evaluation.Records, nil
		}
	}
	keep, err := testStorer(ctx, c.Stderr, store, side.name, seed)
	if err != nil {
		return nil, err
	}
	inf := side.cfg.Inference
	o := evalOptions{concurrency: inf.Concurrency, timeout: time.Duration(inf.RequestTimeout), retries: inf.Retries, retryBudget: time.Duration(inf.RetryBudget), outage: time.Duration(inf.OutageWindow)}
	_, done, err := testCheckpoints(ctx, c.Getenv, c.Stderr, side.cfg, []pick{side.pick}, ns, episodes, o, keep)
	if err != nil {
		return nil, fmt.Errorf("run %s step %d on the test split: %w", side.name, step, err)
	}
	return evaluate.Records(done[step].Episodes), nil
}
