package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"

	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

const compareSynopsis = `Usage: grpo compare [--json] A.jsonl B.jsonl

Compares two 'grpo eval --out' files per table size n: mean reward of A and
of B, the difference B - A with its 95% CI (Welch), Welch's t-test p-value
(two-sided) and Hedges' g (B vs A). Errored episodes are left out. A table
size with scored episodes in only one file cannot be compared: compare
names it on stderr (and under "unmatched" with --json).
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
	HedgesG float64    `json:"hedges_g"`
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
	pathA, pathB string
}

// ParseFlags parses the command line of `grpo compare`.
func (c *CompareCommand) ParseFlags(args []string) error {
	fs := c.newFlags("compare", compareSynopsis)
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
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
		sa, sb := grpo.Summarize(ra), grpo.Summarize(rb)
		w := grpo.Welch(ra, rb)
		out = append(out, comparison{
			N: n, ModelA: a.model, ModelB: b.model,
			A: rewardJSON{sa.Mean, sa.Std, sa.CI95}, B: rewardJSON{sb.Mean, sb.Std, sb.CI95},
			NA: len(ra), NB: len(rb), Diff: w.Diff, DiffCI: w.CI95, T: w.T, DF: w.DF, P: w.P,
			HedgesG: grpo.HedgesG(ra, rb),
		})
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
	fmt.Fprintln(tw, "N\tA\tB\tB-A\t95% CI\tWELCH P\tHEDGES G")
	for _, c := range cs {
		fmt.Fprintf(tw, "%d\t%.3f (%d)\t%.3f (%d)\t%+.3f\t[%.3f, %.3f]\t%.3g\t%+.2f\n",
			c.N, c.A.Mean, c.NA, c.B.Mean, c.NB, c.Diff, c.DiffCI[0], c.DiffCI[1], c.P, c.HedgesG)
	}
	tw.Flush()
	if len(cs) > 0 {
		fmt.Fprintf(w, "A = %s, B = %s; (k) = scored episodes.\n", cs[0].ModelA, cs[0].ModelB)
	}
}

type episodeFile struct {
	model   string
	rewards map[int][]float64
}

// readEpisodes reads an eval --out file: one rollout.Episode per line.
func readEpisodes(path string) (episodeFile, error) {
	ef := episodeFile{rewards: map[int][]float64{}}
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
			ef.rewards[ep.Spec.Env.N] = append(ef.rewards[ep.Spec.Env.N], ep.Reward)
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
