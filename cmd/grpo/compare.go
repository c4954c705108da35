package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

const compareSynopsis = `Usage: grpo compare [--paired] [--json] A.jsonl B.jsonl

Compares two 'grpo eval --out' files per table size n: mean reward of A and
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
	Test    string     `json:"test"`            // welch | paired-t
	Pairs   int        `json:"pairs,omitempty"` // paired-t: tables scored on both sides
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
}

// CompareCommand is `grpo compare`.
type CompareCommand struct {
	*Main
	json         bool
	paired       bool
	pathA, pathB string
}

// ParseFlags parses the command line of `grpo compare`.
func (c *CompareCommand) ParseFlags(args []string) error {
	fs := c.newFlags("compare", compareSynopsis)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&c.paired, "paired", false, "pair episodes by table (seed): paired t-test with a bootstrap CI")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usagef("want two files, A.jsonl and B.jsonl; got %d argument(s)", fs.NArg())
	}
	c.pathA, c.pathB = fs.Arg(0), fs.Arg(1)
	return nil
}

// Run compares the two files per table size and prints the comparisons.
func (c *CompareCommand) Run(ctx context.Context) error {
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
			pr, err := grpo.Paired(ra, rb)
			if err != nil {
				return err
			}
			if cmp.HedgesG, err = grpo.PairedHedgesG(ra, rb); err != nil {
				return err
			}
			cmp.Test, cmp.Pairs, cmp.Diff, cmp.DiffCI, cmp.Boot95, cmp.T, cmp.DF, cmp.P = "paired-t", pr.N, pr.Diff, pr.CI95, &pr.Boot95, pr.T, pr.DF, pr.P
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
	// Holm's family is the comparisons that were tested: a side with one
	// episode (one pair) gives no test, and its p of 1 would raise the
	// others'.
	var tested []*comparison
	var ps []float64
	for i := range out {
		if c := &out[i]; c.DF > 0 {
			tested, ps = append(tested, c), append(ps, c.P)
		} else {
			c.PHolm = 1
		}
	}
	for i, p := range grpo.Holm(ps) {
		tested[i].PHolm = p
	}
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

func printComparisons(w io.Writer, cs []comparison) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	paired := len(cs) > 0 && cs[0].Test == "paired-t"
	hdr := "N\tA\tB\tB-A\t95% CI\tWELCH P\t"
	if paired {
		hdr = "N\tA\tB\tB-A\t95% CI\tBOOTSTRAP CI\tPAIRED P\t"
	}
	if len(cs) > 1 {
		hdr += "P HOLM\t"
	}
	fmt.Fprintln(tw, hdr+"HEDGES G")
	for _, c := range cs {
		line := fmt.Sprintf("%d\t%.3f (%d)\t%.3f (%d)\t%+.3f\t", c.N, c.A.Mean, c.NA, c.B.Mean, c.NB, c.Diff)
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
