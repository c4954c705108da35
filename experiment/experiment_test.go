package experiment

import (
	"math"
	"os"
	"path/filepath"
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
base: {run: {steps: 7, name: ignored, seed: 99}, grpo: {groups: 3, episodes_per_group: 4}, validation: {episodes: 10}}
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
	// Per-arm table: best's per-seed means 1.5 and 2: mean 1.75, sd
	// 0.3535534, se 0.25, t(0.975, 1) = 12.7062: CI 1.75 ± 3.176551.
	rows := s.Table(s.Arms[0], f.Test.Steps, f.Test.N)
	if len(rows) != 2 || rows[0].Kind != "best" || rows[0].Seeds != 2 {
		t.Fatalf("rows %+v", rows)
	}
	near(t, "mean", rows[0].Reward.Mean, 1.75, 1e-12)
	near(t, "table ci lo", rows[0].Reward.CI95[0], 1.75-3.176551, 1e-5)
}

// TestShippedExperiments loads every experiment file under
// examples/experiments/, which checks each arm's config.
func TestShippedExperiments(t *testing.T) {
	files, err := filepath.Glob("../examples/experiments/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no experiment files: %v", err)
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
	}
}
