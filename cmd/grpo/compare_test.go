package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

// writeSeededEpisodes writes an eval --out file: reward rewards[i] on table
// seeds[i] at each table size in ns.
func writeSeededEpisodes(t *testing.T, path, model string, ns []int, seeds []int64, rewards []float64) string {
	t.Helper()
	var b strings.Builder
	for _, n := range ns {
		for i, r := range rewards {
			env := rollout.DefaultEnvConfig()
			env.N, env.Seed = n, seeds[i]
			j, _ := json.Marshal(rollout.Episode{Spec: rollout.EpisodeSpec{ID: fmt.Sprint(i), Model: model, Env: env}, Reward: r})
			b.Write(j)
			b.WriteByte('\n')
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestComparePaired checks --paired against R on the sleep data,
// t.test(extra[group == 2], extra[group == 1], paired = TRUE): t = 4.0621,
// df = 9, p-value = 0.002833, CI [0.7001142, 2.4598858]. B's file lists
// the tables in another order: pairs are made by seed, not by line. Two
// table sizes with the same data give the same p twice; Holm doubles both.
// Hedges' g is the paired one (grpo.PairedHedgesG; numpy from its formula:
// 0.7741018), not the independent groups' 0.7970185.
func TestComparePaired(t *testing.T) {
	g1 := []float64{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0}
	g2 := []float64{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4}
	seeds := []int64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	rev := func(xs []float64) []float64 {
		out := make([]float64, len(xs))
		for i := range xs {
			out[len(xs)-1-i] = xs[i]
		}
		return out
	}
	revSeeds := []int64{19, 18, 17, 16, 15, 14, 13, 12, 11, 10}
	dir := t.TempDir()
	a := writeSeededEpisodes(t, filepath.Join(dir, "a.jsonl"), "base", []int{5, 7}, seeds, g1)
	b := writeSeededEpisodes(t, filepath.Join(dir, "b.jsonl"), "grpo", []int{5, 7}, revSeeds, rev(g2))
	code, out, errs := cli(t, "compare", "--paired", "--json", a, b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var cmp struct{ Comparisons []comparison }
	if err := json.Unmarshal([]byte(out), &cmp); err != nil || len(cmp.Comparisons) != 2 {
		t.Fatalf("compare --paired --json: %v\n%s", err, out)
	}
	for _, c := range cmp.Comparisons {
		if c.Test != "paired-t" || c.Pairs != 10 || math.Abs(c.T-4.0621) > 5e-5 || c.DF != 9 || math.Abs(c.P-0.002833) > 5e-7 ||
			math.Abs(c.DiffCI[0]-0.7001142) > 5e-8 || math.Abs(c.DiffCI[1]-2.4598858) > 5e-8 || math.Abs(c.Diff-1.58) > 1e-12 ||
			math.Abs(c.PHolm-2*c.P) > 1e-15 || math.Abs(c.HedgesG-0.7741018) > 5e-8 || c.Boot95 == nil || !(c.Boot95[0] > 0 && c.Boot95[0] < 1.58 && c.Boot95[1] > 1.58) {
			t.Fatalf("paired comparison %+v", c)
		}
	}
	// Without --paired the same files give Welch (p = 0.07939), also
	// Holm-corrected across the two sizes: 2 x 0.07939.
	code, out, _ = cli(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "WELCH P") || !strings.Contains(out, "0.0794") || !strings.Contains(out, "0.159") || !strings.Contains(out, "P HOLM") {
		t.Fatalf("welch table:\n%s", out)
	}
	// Welch has no bootstrap interval: the JSON leaves it out (it once
	// repeated the Welch CI there).
	code, out, _ = cli(t, "compare", "--json", a, b)
	if code != 0 || !strings.Contains(out, `"test": "welch"`) && !strings.Contains(out, `"test":"welch"`) || strings.Contains(out, "boot_ci95") {
		t.Fatalf("welch JSON:\n%s", out)
	}
	code, out, _ = cli(t, "compare", "--paired", a, b)
	if code != 0 || !strings.Contains(out, "PAIRED P") || !strings.Contains(out, "0.00283") || !strings.Contains(out, "BOOTSTRAP CI") {
		t.Fatalf("paired table:\n%s", out)
	}

	if strings.Contains(errs, "left out") {
		t.Fatalf("every table paired, yet: %s", errs)
	}
	// Files sharing some tables: the others are left out, and said so.
	part := writeSeededEpisodes(t, filepath.Join(dir, "p.jsonl"), "grpo", []int{5}, []int64{16, 17, 18, 19, 20, 21}, g2[:6])
	code, out, errs = cli(t, "compare", "--paired", "--json", a, part)
	var pc struct{ Comparisons []comparison }
	if code != 0 || json.Unmarshal([]byte(out), &pc) != nil || len(pc.Comparisons) != 1 {
		t.Fatalf("compare --paired on partly shared tables: exit %d %s %s", code, out, errs)
	}
	if c := pc.Comparisons[0]; c.Pairs != 4 || c.OnlyA != 6 || c.OnlyB != 2 ||
		!strings.Contains(errs, "n=5: 4 table(s) scored in both files are paired; 6 only in "+a+" and 2 only in "+part+" are left out") {
		t.Fatalf("partly shared tables: %+v, stderr %q", c, errs)
	}
	// Files on other tables cannot be paired; a table played twice neither.
	other := writeSeededEpisodes(t, filepath.Join(dir, "c.jsonl"), "grpo", []int{5}, []int64{90, 91, 92, 93, 94, 95, 96, 97, 98, 99}, g2)
	if code, _, errs := cli(t, "compare", "--paired", a, other); code == 0 || !strings.Contains(errs, "share no table") {
		t.Fatalf("--paired on other tables: exit %d %s", code, errs)
	}
	twice := writeSeededEpisodes(t, filepath.Join(dir, "d.jsonl"), "grpo", []int{5}, []int64{10, 10, 12, 13, 14, 15, 16, 17, 18, 19}, g2)
	if code, _, errs := cli(t, "compare", "--paired", a, twice); code == 0 || !strings.Contains(errs, "a second episode on table n=5 seed 10") {
		t.Fatalf("--paired with a table played twice: exit %d %s", code, errs)
	}
}

// TestCompareOnePair: a table size with one pair (or, without --paired,
// a side with one episode) has no variance estimate: compare prints "-"
// for its interval, test and g, not a zero-width CI and p = 1, and leaves
// it out of the other sizes' Holm correction. By hand, n=5: differences
// 1, 2, 0: mean 1, sd 1, t = sqrt(3) on 2 df, p = 1 - t/sqrt(t²+2) =
// 0.2254033 (Holm over n=5 alone: the same; with n=7's p of 1 it was
// doubled); g (grpo.PairedHedgesG): both sides var 1, cov 0.5, ν = 3.2,
// J = 1 - 3/11.8 = 0.746.
func TestCompareOnePair(t *testing.T) {
	dir := t.TempDir()
	join := func(name string, paths ...string) string {
		var all []byte
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, all, 0o644)
		return p
	}
	a := join("a.jsonl",
		writeSeededEpisodes(t, filepath.Join(dir, "a5"), "base", []int{5}, []int64{10, 11, 12}, []float64{1, 2, 3}),
		writeSeededEpisodes(t, filepath.Join(dir, "a7"), "base", []int{7}, []int64{10}, []float64{1}))
	b := join("b.jsonl",
		writeSeededEpisodes(t, filepath.Join(dir, "b5"), "grpo", []int{5}, []int64{10, 11, 12}, []float64{2, 4, 3}),
		writeSeededEpisodes(t, filepath.Join(dir, "b7"), "grpo", []int{7}, []int64{10}, []float64{3}))
	code, out, errs := cli(t, "compare", "--paired", "--json", a, b)
	var cmp struct{ Comparisons []comparison }
	if code != 0 || json.Unmarshal([]byte(out), &cmp) != nil || len(cmp.Comparisons) != 2 {
		t.Fatalf("compare --paired --json: exit %d %s %s", code, out, errs)
	}
	five, seven := cmp.Comparisons[0], cmp.Comparisons[1]
	if math.Abs(five.P-0.2254033) > 1e-6 || math.Abs(five.PHolm-0.2254033) > 1e-6 || seven.Pairs != 1 || seven.P != 1 || seven.PHolm != 1 {
		t.Fatalf("n=5 %+v\nn=7 %+v", five, seven)
	}
	code, out, _ = cli(t, "compare", "--paired", a, b)
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	// N A (k) B (k) B-A [lo, hi] [lo, hi] P HOLM G: 13 fields tested, 9 with dashes.
	if code != 0 || len(rows) != 4 || len(rows[1]) != 13 || rows[1][10] != "0.225" || rows[1][11] != "0.225" || rows[1][12] != "+0.75" ||
		strings.Join(rows[2], " ") != "7 1.000 (1) 3.000 (1) +2.000 - - - - -" {
		t.Fatalf("compare --paired table:\n%s", out)
	}
	// Without --paired, one episode at n=7 on each side: no Welch test either.
	code, out, _ = cli(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "+2.000  -") || strings.Contains(out, "[2.000, 2.000]") {
		t.Fatalf("compare table:\n%s", out)
	}
}
