package experiment

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/rollout"
)

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s=%.10g, want %.10g (±%g)", name, got, want, tol)
	}
}

func TestLoadMergesArmsOverBase(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "e.yaml")
	os.WriteFile(p, []byte(`experiment: {name: cd, seeds: [3, 4]}
base: {run: {steps: 7}, grpo: {groups: 3, episodes_per_group: 4}, validation: {episodes: 10}}
arms:
  - {name: paper, set: {reward: {function: paper}, grpo: {groups: 5}}}
  - {name: plain}
test: {n: [5, 10], episodes: 20, seed: 3000000}
`), 0o644)
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if f.DB != filepath.Join(dir, "cd.db") || f.Out != filepath.Join(dir, "cd") {
		t.Fatalf("db %s out %s, want both beside the file", f.DB, f.Out)
	}
	c, err := f.Config("paper", 4)
	if err != nil {
		t.Fatal(err)
	}
	// Deep merge: grpo.groups from the arm, grpo.episodes_per_group kept
	// from the base; run.name, run.seed, run.db and test from the experiment.
	if c.GRPO.Groups != 5 || c.GRPO.EpisodesPerGroup != 4 || c.Reward.Function != rollout.Paper || c.Run.Steps != 7 ||
		c.Run.Name != "cd/paper/4" || c.Run.Seed != 4 || c.Run.DB != f.DB || c.Validation.Episodes != 10 ||
		len(c.Test.N) != 2 || c.Test.Episodes != 20 || c.Test.Seed != 3000000 {
		t.Fatalf("Config(paper, 4) = %+v", c)
	}
	c, err = f.Config("plain", 3)
	if err != nil || c.GRPO.Groups != 3 || c.Reward.Function != rollout.Shaped || c.Run.Name != "cd/plain/3" {
		t.Fatalf("Config(plain, 3) = %+v, %v", c, err)
	}
	// The base is not changed by merging an arm over it.
	if c2, _ := f.Config("plain", 3); c2.GRPO.Groups != 3 {
		t.Fatal("merging an arm changed the base")
	}
	// What the experiment sets itself, a base or an arm may not: it
	// would be overridden without a word.
	for _, doc := range []string{
		"base: {run: {name: mine}}\narms: [{name: a}]\n",
		"base: {run: {steps: 2}}\narms: [{name: a, set: {run: {seed: 7}}}]\n",
		"arms: [{name: a, set: {run: {db: x.db}}}]\n",
		"base: {test: {episodes: 9}}\narms: [{name: a}]\n",
	} {
		os.WriteFile(p, []byte("experiment: {name: cd, seeds: [3]}\n"+doc), 0o644)
		key := map[bool]string{true: "run.", false: "test"}[strings.Contains(doc, "run: {name") || strings.Contains(doc, "seed: 7") || strings.Contains(doc, "db: x")]
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "is set by the experiment itself") || !strings.Contains(err.Error(), key) {
			t.Errorf("Load(%q) = %v, want a refusal naming the key", doc, err)
		}
	}
}

// TestLoadTestNDefault: a file whose test section lists no n measures
// every arm at the sizes any arm trains at (env.n, or a curriculum's
// sizes), first arm first; one that lists n keeps it.
func TestLoadTestNDefault(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "e.yaml")
	for _, tc := range []struct {
		doc  string
		want []int
	}{
		{"base: {env: {n: 2}}\narms: [{name: a}]\n", []int{2}},
		{"base: {env: {n: 2}}\narms: [{name: a}]\ntest: {episodes: 20}\n", []int{2}},
		{"base: {env: {n: 3}}\narms: [{name: a}, {name: b, set: {curriculum: {schedule: '4@0,6@2'}}}, {name: c, set: {env: {n: 6}}}]\n", []int{3, 4, 6}},
		{"base: {env: {n: 2}}\narms: [{name: a}]\ntest: {n: [5, 10]}\n", []int{5, 10}},
	} {
		os.WriteFile(p, []byte("experiment: {name: cd, seeds: [1]}\n"+tc.doc), 0o644)
		f, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%q): %v", tc.doc, err)
		}
		if !slices.Equal(f.Test.N, tc.want) {
			t.Errorf("Load(%q): test.n=%v, want %v", tc.doc, f.Test.N, tc.want)
		}
		for _, a := range f.Arms {
			if c, err := f.Config(a.Name, 1); err != nil || !slices.Equal(c.Test.N, tc.want) {
				t.Errorf("Load(%q): arm %s's run: test.n=%v, %v; want %v", tc.doc, a.Name, c.Test.N, err, tc.want)
			}
		}
	}
}

// rec is a test record at n=5 on table seed table.
func rec(table int64, r float64) checkpoint.EpisodeRecord {
	return checkpoint.EpisodeRecord{N: 5, Seed: table, Reward: r}
}

// TestSummarize checks the comparisons and the per-arm table by hand.
func TestSummarize(t *testing.T) {
	f := &File{Name: "x", Seeds: []int64{1, 2}, Arms: []Arm{{Name: "a"}}, Test: Test{N: []int{5}, Episodes: 2, Steps: []string{"best", "last"}}}
	ev := func(mean float64, rs ...checkpoint.EpisodeRecord) checkpoint.Evaluation {
		return checkpoint.Evaluation{PerN: []checkpoint.EvalN{{N: 5, Episodes: len(rs), RewardMean: mean}}, Records: rs}
	}
	results := []RunResult{
		// Seed 2 first: order must not matter.
		{Arm: "a", Seed: 2, Run: "x/a/2", BestStep: 1, LastStep: 2, Tests: map[string]checkpoint.Evaluation{
			"best": ev(2, rec(10, 3), rec(11, 1)), "last": ev(1, rec(10, 1), rec(11, 1))}},
		{Arm: "a", Seed: 1, Run: "x/a/1", BestStep: 2, LastStep: 2, Tests: map[string]checkpoint.Evaluation{
			"best": ev(1.5, rec(10, 1), rec(11, 2)), "last": ev(0.5, rec(10, 0), rec(11, 1))}},
	}
	s, err := f.Summarize(results)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Arms) != 1 || s.Arms[0].Runs[0].Seed != 1 || s.Arms[0].Runs[1].BestStep != 1 || s.Arms[0].Runs[0].Test["best"]["5"].RewardMean != 1.5 {
		t.Fatalf("arms %+v", s.Arms)
	}
	if len(s.Comparisons) != 1 {
		t.Fatalf("comparisons %+v, want best vs last only", s.Comparisons)
	}
	// best - last per (seed, table): 1, 1, 2, 0: mean 1, sd sqrt(2/3),
	// se 0.4082483, t(0.975, 3) = 3.182446: CI 1 ± 1.299228.
	c := s.Comparisons[0]
	if c.A != "a/best" || c.B != "a/last" || c.Pairs != 4 || c.Test != "paired-t" || c.PHolm != c.P {
		t.Fatalf("comparison %+v", c)
	}
	near(t, "diff", c.Diff, 1, 1e-12)
	near(t, "ci lo", c.CI95[0], 1-1.299228, 1e-5)
	near(t, "ci hi", c.CI95[1], 1+1.299228, 1e-5)
	// g, paired (grpo.PairedHedgesG): best 1, 2, 3, 1 (var 11/12), last
	// 0, 1, 1, 1 (var 3/12), cov 3/12: s_p² = 7/12, d = 1/sqrt(7/12);
	// ν = 3·(14/12)² / ((121 + 9 + 2·9)/144) = 588/148, J = 1 - 3/(4ν-1)
	// = 1760/2204. (As independent groups, J = 1 - 3/23: g 1.1385.)
	near(t, "g", c.G, 1/math.Sqrt(7.0/12)*1760/2204, 1e-12)
	// Per-arm table: best's per-seed means 1.5 and 2: mean 1.75, sd
	// 0.3535534, se 0.25, t(0.975, 1) = 12.7062: CI 1.75 ± 3.176551.
	rows := s.Table(s.Arms[0], f.Test.Steps, f.Test.N)
	if len(rows) != 2 || rows[0].Kind != "best" || rows[0].Seeds != 2 {
		t.Fatalf("rows %+v", rows)
	}
	near(t, "mean", rows[0].Reward.Mean, 1.75, 1e-12)
	near(t, "table ci lo", rows[0].Reward.CI95[0], 1.75-3.176551, 1e-5)
}

// TestSummarizeSortsExtremeSeeds: runs are listed in seed order for any
// int64 seeds; the order once came from the seeds' difference, which
// overflows for math.MaxInt64 and -2 and put the larger first.
func TestSummarizeSortsExtremeSeeds(t *testing.T) {
	f := &File{Name: "x", Seeds: []int64{math.MaxInt64, -2}, Arms: []Arm{{Name: "a"}}, Test: Test{N: []int{5}, Episodes: 1, Steps: []string{"best"}}}
	s, err := f.Summarize([]RunResult{{Arm: "a", Seed: math.MaxInt64}, {Arm: "a", Seed: -2}})
	if err != nil {
		t.Fatal(err)
	}
	if runs := s.Arms[0].Runs; len(runs) != 2 || runs[0].Seed != -2 || runs[1].Seed != math.MaxInt64 {
		t.Fatalf("runs %+v, want seed -2 then %d", runs, int64(math.MaxInt64))
	}
}

// TestSummarizeBySeed checks the seed-level comparison by hand: per-seed
// mean differences 1, 2 and 0.
func TestSummarizeBySeed(t *testing.T) {
	f := &File{Name: "x", Seeds: []int64{1, 2, 3}, Arms: []Arm{{Name: "a"}}, Test: Test{N: []int{5}, Episodes: 2, Steps: []string{"best", "last"}}}
	ev := func(rs ...checkpoint.EpisodeRecord) checkpoint.Evaluation {
		return checkpoint.Evaluation{PerN: []checkpoint.EvalN{{N: 5, Episodes: len(rs)}}, Records: rs}
	}
	run := func(seed int64, best, last [2]float64) RunResult {
		return RunResult{Arm: "a", Seed: seed, Tests: map[string]checkpoint.Evaluation{
			"best": ev(rec(10, best[0]), rec(11, best[1])), "last": ev(rec(10, last[0]), rec(11, last[1]))}}
	}
	s, err := f.Summarize([]RunResult{run(1, [2]float64{2, 1}, [2]float64{1, 0}), run(3, [2]float64{1, 2}, [2]float64{2, 1}), run(2, [2]float64{3, 3}, [2]float64{1, 1})})
	if err != nil {
		t.Fatal(err)
	}
	c := s.Comparisons[0]
	if c.Pairs != 6 || c.BySeed == nil || c.BySeed.Seeds != 3 {
		t.Fatalf("comparison %+v by seed %+v", c, c.BySeed)
	}
	// Seed means of best - last: 1, 2, 0: mean 1, sd 1, se 0.5773503;
	// t = 1.732051 on 2 df: p = 1 - t/sqrt(t^2 + 2) = 0.2254033;
	// t(0.975, 2) = 4.302653: CI 1 ± 2.484138.
	near(t, "seed diff", c.BySeed.Diff, 1, 1e-12)
	near(t, "seed p", c.BySeed.P, 0.2254033, 1e-6)
	near(t, "seed ci lo", c.BySeed.CI95[0], 1-2.484138, 1e-5)
	near(t, "seed ci hi", c.BySeed.CI95[1], 1+2.484138, 1e-5)
	near(t, "seed p holm (one comparison)", c.BySeed.PHolm, c.BySeed.P, 0)
	// The (seed, table) units: 1, 1, 2, 2, -1, 1: mean 1, and a smaller p
	// than the seeds' (5 df).
	near(t, "units diff", c.Diff, 1, 1e-12)
	if !(c.P < c.BySeed.P) {
		t.Errorf("units p %v, seeds p %v: want the units' smaller", c.P, c.BySeed.P)
	}
	var b strings.Builder
	if err := f.WriteReport(&b, s, "grpo experiment x.yaml", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| 3 | [-1.484, 3.484] | 0.225 | 0.225 |") {
		t.Fatalf("report has no seed-level columns:\n%s", b.String())
	}
}

// TestShippedExperiments loads every experiment file under
// examples/experiments/, which checks each arm's config.
func TestShippedExperiments(t *testing.T) {
	files, err := filepath.Glob("../examples/experiments/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no experiment files: %v", err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		f, err := Load(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(f.Seeds) < 5 {
			t.Errorf("%s: %d seeds; shipped experiments use at least 5", p, len(f.Seeds))
		}
		// Running a shipped file writes its store and report outside the
		// repository: not over the committed reports under docs/ (those
		// are refreshed with --out).
		for what, path := range map[string]string{"experiment.db": f.DB, "experiment.out": f.Out} {
			if rel, err := filepath.Rel(repo, path); err != nil || !strings.HasPrefix(rel, "..") {
				t.Errorf("%s: %s %s is inside the repository", p, what, path)
			}
		}
	}
}

// TestOptimism checks a checkpoint's validation-vs-test cell and the
// report's row by hand: the test reward is taken on the validation's sizes
// only (n=10 records are left out), errored episodes are not scored, and
// the optimism is validation minus test, summarised across seeds.
func TestOptimism(t *testing.T) {
	f := &File{Name: "x", Seeds: []int64{1, 2}, Arms: []Arm{{Name: "a"}}, Test: Test{N: []int{5, 10}, Episodes: 2, Steps: []string{"base", "best", "last"}}}
	ev := func(rs ...checkpoint.EpisodeRecord) checkpoint.Evaluation {
		return checkpoint.Evaluation{PerN: []checkpoint.EvalN{{N: 5, Episodes: 2}, {N: 10, Episodes: 2}}, Records: rs}
	}
	at10 := func(table int64, r float64) checkpoint.EpisodeRecord {
		return checkpoint.EpisodeRecord{N: 10, Seed: table, Reward: r}
	}
	errored := checkpoint.EpisodeRecord{N: 5, Seed: 12, Reward: 9, Errored: true}
	results := []RunResult{
		{Arm: "a", Seed: 1, Run: "x/a/1", BestStep: 3, LastStep: 4, ValidationN: []int{5},
			Validation: map[int]float64{0: 0.2, 3: 1.5, 4: 1.0},
			Tests: map[string]checkpoint.Evaluation{
				"base": ev(rec(10, 0.1), rec(11, 0.3), at10(10, 5)),
				"best": ev(rec(10, 1.0), rec(11, 0.8), errored, at10(10, 5)), // test 0.9: optimism 0.6
				"last": ev(rec(10, 1.1), rec(11, 0.9), at10(10, 5)),          // test 1.0: optimism 0
			}},
		{Arm: "a", Seed: 2, Run: "x/a/2", BestStep: 2, LastStep: 4, ValidationN: []int{5},
			Validation: map[int]float64{0: 0.2, 2: 1.2, 4: 0.9},
			Tests: map[string]checkpoint.Evaluation{
				"best": ev(rec(10, 1.0), rec(11, 1.0)), // test 1.0: optimism 0.2
			}},
	}
	s, err := f.Summarize(results)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Arms[0].Runs[0].Validation["best"]
	if c.Step != 3 || c.ValidationReward != 1.5 {
		t.Fatalf("best cell %+v", c)
	}
	near(t, "test reward", c.TestReward, 0.9, 1e-12)
	near(t, "optimism", c.Optimism, 0.6, 1e-12)
	near(t, "base optimism", s.Arms[0].Runs[0].Validation["base"].Optimism, 0, 1e-12)
	rows := s.Optimism(s.Arms[0], f.Test.Steps)
	if len(rows) != 3 || rows[1].Kind != "best" || rows[1].Seeds != 2 || rows[2].Seeds != 1 {
		t.Fatalf("rows %+v", rows)
	}
	// best's optimisms 0.6 and 0.2: mean 0.4, sd 0.2828427, se 0.2,
	// t(0.975, 1) = 12.7062: CI 0.4 ± 2.541241.
	near(t, "mean optimism", rows[1].Optimism.Mean, 0.4, 1e-12)
	near(t, "ci lo", rows[1].Optimism.CI95[0], 0.4-2.541241, 1e-5)
	near(t, "mean validation", rows[1].ValidationReward, 1.35, 1e-12)
	near(t, "mean test", rows[1].TestReward, 0.95, 1e-12)
	var b strings.Builder
	if err := f.WriteReport(&b, s, "grpo experiment x.yaml", nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| best | 2 | 1.350 | 0.950 | +0.400 | [-2.141, 2.941] |") {
		t.Fatalf("report has no optimism row for best:\n%s", b.String())
	}
	// A run without validation sizes (none recorded) has no cells.
	if cells := (RunResult{Tests: results[0].Tests, Validation: results[0].Validation}).validationCells(); cells != nil {
		t.Fatalf("cells without validation sizes: %+v", cells)
	}
	// Validation on n=5 and n=15, a test split scored at n=5 and n=10:
	// the validation reward 1.5 averages over n=15 too, which no test
	// reward covers, so there is no cell (it was 1.5 - 0.9 = 0.6 from n=5
	// alone). base and last cover n=15 with a scored episode (last's other
	// one errored): their cells stand, over n=5 and n=15.
	at15 := func(table int64, r float64, errored bool) checkpoint.EpisodeRecord {
		return checkpoint.EpisodeRecord{N: 15, Seed: table, Reward: r, Errored: errored}
	}
	partial := RunResult{BestStep: 3, LastStep: 4, ValidationN: []int{5, 15}, Validation: results[0].Validation,
		Tests: map[string]checkpoint.Evaluation{
			"base": ev(rec(10, 0.1), rec(11, 0.3), at15(10, 0.5, false)),                    // (0.1+0.3+0.5)/3 = 0.3: optimism 0.2-0.3
			"best": ev(rec(10, 1.0), rec(11, 0.8), at10(10, 5)),                             // no n=15
			"last": ev(rec(10, 1.1), rec(11, 0.9), at15(10, 1.3, false), at15(11, 9, true)), // 3.3/3 = 1.1: optimism -0.1
		}}
	cells := partial.validationCells()
	if _, ok := cells["best"]; ok || len(cells) != 2 {
		t.Fatalf("cells with a validation size the test split did not score: %+v", cells)
	}
	near(t, "base optimism over n=5 and 15", cells["base"].Optimism, 0.2-0.3, 1e-12)
	near(t, "last optimism over n=5 and 15", cells["last"].Optimism, 1.0-1.1, 1e-12)
}

// TestReportOneSeedOnePair: one seed gives no interval across seeds, and
// one pair no test: the report prints "-" for them, not a zero-width CI
// ([mean, mean]) or p = 1, and the untested comparison does not count in
// the others' Holm correction. By hand: best - last at n=10 is 1, 0, 2:
// mean 1, sd 1, t = sqrt(3) on 2 df, p = 1 - t/sqrt(t²+2) = 0.2254033,
// CI 1 ± 4.302653/sqrt(3); g: both sides var 1, cov 0.5, ν = 3.2, J = 1 -
// 3/11.8 = 0.746. With the one-pair comparison in Holm's family its Holm p
// would be 2 × 0.2254.
func TestReportOneSeedOnePair(t *testing.T) {
	f := &File{Name: "x", Seeds: []int64{1}, Arms: []Arm{{Name: "a"}}, Test: Test{N: []int{5, 10}, Episodes: 3, Steps: []string{"best", "last"}}}
	ev := func(m5, m10 float64, rs ...checkpoint.EpisodeRecord) checkpoint.Evaluation {
		return checkpoint.Evaluation{PerN: []checkpoint.EvalN{{N: 5, Episodes: 1, RewardMean: m5}, {N: 10, Episodes: 3, RewardMean: m10}}, Records: rs}
	}
	at10 := func(table int64, r float64) checkpoint.EpisodeRecord {
		return checkpoint.EpisodeRecord{N: 10, Seed: table, Reward: r}
	}
	s, err := f.Summarize([]RunResult{{Arm: "a", Seed: 1, Run: "x/a/1", BestStep: 3, LastStep: 4, ValidationN: []int{5},
		Validation: map[int]float64{3: 1.5, 4: 0.5},
		Tests: map[string]checkpoint.Evaluation{
			"best": ev(2, 2, rec(10, 2), at10(10, 1), at10(11, 2), at10(12, 3)),
			"last": ev(1, 1, rec(10, 1), at10(10, 0), at10(11, 2), at10(12, 1)),
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Comparisons) != 2 || s.Comparisons[0].Pairs != 1 || s.Comparisons[1].Pairs != 3 {
		t.Fatalf("comparisons %+v", s.Comparisons)
	}
	one, three := s.Comparisons[0], s.Comparisons[1]
	if one.P != 1 || one.PHolm != 1 {
		t.Errorf("one pair: p %v, Holm p %v; want 1, 1", one.P, one.PHolm)
	}
	near(t, "p", three.P, 0.2254033, 1e-6)
	near(t, "Holm p (the one-pair comparison not counted)", three.PHolm, 0.2254033, 1e-6)
	var b strings.Builder
	if err := f.WriteReport(&b, s, "grpo experiment x.yaml", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| best | 5 | 1 | 2.000 | - | 0.00 | 0.00 | 0.000 |",
		"| best | 1 | 1.500 | 2.000 | -0.500 | - |",
		"| a/best | a/last | 5 | 1 | +1.000 | - | - | - | - | 1 | - | - | - |",
		"| a/best | a/last | 10 | 3 | +1.000 | [-1.484, 3.484] | 0.225 | 0.225 | +0.75 | 1 | - | - | - |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestReportNotes: a report of arms scored by different reward functions
// says their rewards are on different scales, and an arm that does not
// select on validation does not call its validation reward the score
// selection saw.
func TestReportNotes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "e.yaml")
	os.WriteFile(p, []byte(`experiment: {name: rn, seeds: [1]}
arms:
  - {name: shaped}
  - {name: paper, set: {reward: {function: paper}, validation: {selection: best-train}}}
`), 0o644)
	f, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	row := func(arm string) ArmSummary {
		return ArmSummary{Name: arm, Runs: []RunSummary{{Seed: 1, Run: "rn/" + arm + "/1",
			Validation: map[string]ValidationCell{"best": {Step: 1, ValidationReward: 1, TestReward: 0.5, Optimism: 0.5}}}}}
	}
	s := Summary{Experiment: "rn", Arms: []ArmSummary{row("shaped"), row("paper")},
		Comparisons: []Comparison{{A: "shaped/best", B: "paper/best", N: 5, Pairs: 4}}}
	var b strings.Builder
	if err := f.WriteReport(&b, s, "grpo experiment e.yaml", nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"different reward functions (shaped, paper)",
		"validation reward (the score selection saw)",
		"validation reward (not what selection saw: this arm selects by best-train)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestPlotsKeepLegendAndTitleClear: the legend is drawn in a column right
// of the plot, so the last steps' markers (at the right edge of the data)
// are not under it, and the title has a margin above it: the image's top
// rows and its right edge are background, while the arms' colours appear
// in the legend's column.
func TestPlotsKeepLegendAndTitleClear(t *testing.T) {
	f := &File{Name: "plots", Arms: []Arm{{Name: "alpha"}, {Name: "beta"}}, Test: Test{N: []int{5}, Episodes: 2, Steps: []string{"best"}}}
	var results []RunResult
	for i, arm := range []string{"alpha", "beta"} {
		for seed := int64(1); seed <= 2; seed++ {
			v := map[int]float64{0: 0.2, 1: 0.5 + 0.1*float64(i), 2: 1.2}
			results = append(results, RunResult{Arm: arm, Seed: seed, BestStep: 2, LastStep: 2, Validation: v})
		}
	}
	dir := t.TempDir()
	if _, err := f.WritePlots(dir, Summary{}, results); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(filepath.Join(dir, "curves.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	img, err := png.Decode(fh)
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	blank := func(x, y int) bool {
		r, g, bl, _ := img.At(x, y).RGBA()
		return r > 0xf000 && g > 0xf000 && bl > 0xf000
	}
	for y := b.Min.Y; y < b.Min.Y+4; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if !blank(x, y) {
				t.Fatalf("pixel (%d, %d) of the top margin is drawn: the title touches the image's edge", x, y)
			}
		}
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Max.X - 4; x < b.Max.X; x++ {
			if !blank(x, y) {
				t.Fatalf("pixel (%d, %d) of the right margin is drawn", x, y)
			}
		}
	}
	// Both arms' legend entries are drawn, at the top of the image's
	// right side.
	for ai := range f.Arms {
		want, found := palette[ai], false
		for x := b.Max.X - b.Dx()/6; x < b.Max.X && !found; x++ {
			for y := b.Min.Y; y < b.Min.Y+b.Dy()/5; y++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if uint8(r>>8) == want.R && uint8(g>>8) == want.G && uint8(bl>>8) == want.B {
					found = true
					break
				}
			}
		}
		if !found {
			t.Errorf("arm %s's colour is not in the legend's place (top right)", f.Arms[ai].Name)
		}
	}
}

// TestLoadNamesBadKeys checks that a misspelt key or a value of the wrong
// type in the experiment's own sections is refused naming its key path
// and what is accepted, as a run config's are, and not with the Go types
// the file is decoded into.
func TestLoadNamesBadKeys(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "e.yaml")
	for _, c := range []struct{ doc, want string }{
		{"experiment: {name: x, seeds: [1], bogus: 1}\narms: [{name: a}]\n",
			"line 1, column 35: experiment.bogus: unknown key; accepted: name, seeds, db, out"},
		{"experimentt: {name: x, seeds: [1]}\narms: [{name: a}]\n",
			"line 1, column 1: experimentt: unknown key (did you mean experiment?); accepted: experiment, base, arms, test"},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a, sett: {}}]\n",
			"line 2, column 18: arms[0].sett: unknown key (did you mean set?); accepted: name, set"},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a}]\ntest: {nn: [5]}\n",
			"line 3, column 8: test.nn: unknown key (did you mean n?); accepted: n, episodes, seed, steps"},
		{"experiment: {name: x, seeds: [1, a]}\narms: [{name: a}]\n",
			`line 1, column 34: experiment.seeds[1]: expected an integer, got "a"`},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a}]\ntest: {n: 5}\n",
			`line 3, column 11: test.n: expected a list of integers, got "5"`},
		{"experiment: {name: x, seeds: [1]}\narms: {name: a}\n",
			"line 2, column 7: arms: expected a list of mappings with keys name, set, got a mapping"},
	} {
		os.WriteFile(p, []byte(c.doc), 0o644)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%q) = %v\nwant an error holding %q", c.doc, err, c.want)
		}
	}
}
