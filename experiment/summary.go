package experiment

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
)

// RunResult is what an experiment's run left in the store: its selected
// and last steps and the test measurement of each checkpoint kind.
type RunResult struct {
	Arm      string
	Seed     int64
	Run      string
	BestStep int
	LastStep int
	Tests    map[string]checkpoint.Evaluation // base | best | last -> on the test split
	// Validation is the run's validation reward by step (the curve the
	// best step was chosen on), for the plots and the optimism of a
	// checkpoint.
	Validation map[int]float64
	// ValidationN are the table sizes of the run's validation
	// (validation.n): a checkpoint's validation score is compared with its
	// test score on these sizes.
	ValidationN []int
}

// Summary is summary.json (DESIGN §11).
type Summary struct {
	Experiment  string       `json:"experiment"`
	Arms        []ArmSummary `json:"arms"`
	Comparisons []Comparison `json:"comparisons"`
}

// ArmSummary is one arm's runs.
type ArmSummary struct {
	Name string       `json:"name"`
	Runs []RunSummary `json:"runs"`
}

// RunSummary is one run: test results by checkpoint kind and table size.
type RunSummary struct {
	Seed     int64                          `json:"seed"`
	Run      string                         `json:"run"`
	BestStep int                            `json:"best_step"`
	LastStep int                            `json:"last_step"`
	Test     map[string]map[string]TestCell `json:"test"`
	// Validation is, per checkpoint kind, the step's validation score next
	// to its test score on the validation's table sizes.
	Validation map[string]ValidationCell `json:"validation,omitempty"`
}

// ValidationCell is a checkpoint's validation reward (what selection saw)
// and its test reward on the same table sizes (validation.n); Optimism is
// the first minus the second: how much the validation score overstates the
// checkpoint on fresh tables.
type ValidationCell struct {
	Step             int     `json:"step"`
	ValidationReward float64 `json:"validation_reward"`
	TestReward       float64 `json:"test_reward"`
	Optimism         float64 `json:"optimism"`
}

// validationCells pairs each measured checkpoint's validation reward with
// its test reward over the test records at the validation's sizes. A
// checkpoint whose test split scored none at one of those sizes has no
// cell: its validation reward averages over sizes its test reward would
// leave out, and rewards differ by table size.
func (r RunResult) validationCells() map[string]ValidationCell {
	out := map[string]ValidationCell{}
	for kind, ev := range r.Tests {
		step := map[string]int{"base": 0, "best": r.BestStep, "last": r.LastStep}
		s, ok := step[kind]
		if !ok {
			continue
		}
		v, ok := r.Validation[s]
		if !ok {
			continue
		}
		var sum float64
		var k int
		scored := map[int]bool{}
		for _, e := range ev.Records {
			if !e.Errored && slices.Contains(r.ValidationN, e.N) {
				sum += e.Reward
				k++
				scored[e.N] = true
			}
		}
		if k == 0 || slices.ContainsFunc(r.ValidationN, func(n int) bool { return !scored[n] }) {
			continue
		}
		t := sum / float64(k)
		out[kind] = ValidationCell{Step: s, ValidationReward: v, TestReward: t, Optimism: v - t}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// TestCell is one checkpoint at one table size on the test split.
type TestCell struct {
	RewardMean   float64 `json:"reward_mean"`
	DeadlockRate float64 `json:"deadlock_rate"`
	MealsMean    float64 `json:"meals_mean"`
	InvalidRate  float64 `json:"invalid_rate"`
	Episodes     int     `json:"episodes"`
}

// Comparison is A - B at one table size, paired across shared tables:
// the units are (run.seed, test table) pairs scored on both sides, so
// within an arm a checkpoint is compared with another of the same run, and
// across arms runs of the same seed are paired. With fewer than 2 pairs
// there is no test: CI95 is [Diff, Diff], P and PHolm are 1 and G is 0
// (the report prints "-"), and the comparison is not counted in the
// others' Holm correction.
type Comparison struct {
	A     string     `json:"a"` // arm/kind
	B     string     `json:"b"`
	N     int        `json:"n"`
	Diff  float64    `json:"diff"` // mean(A - B)
	CI95  [2]float64 `json:"ci95"`
	P     float64    `json:"p"`
	PHolm float64    `json:"p_holm"` // Holm across every comparison of the experiment with 2 pairs or more
	G     float64    `json:"g"`      // Hedges' g of A vs B for paired samples (grpo.PairedHedgesG: pooled SD of the two sides' rewards, J on the pairs' degrees of freedom)
	Test  string     `json:"test"`   // paired-t
	Pairs int        `json:"pairs"`
	// BySeed is the same comparison with the seed as the unit: a paired
	// t-test over the seeds' mean differences (df = seeds - 1). The
	// (seed, table) units above share their tables across seeds and their
	// run within a seed, so their p says whether these runs differ on
	// these tables; whether the training choice makes a difference beyond
	// these seeds is BySeed's p. Absent with fewer than 2 seeds.
	BySeed *SeedComparison `json:"by_seed,omitempty"`
}

// SeedComparison is a comparison over the seeds' mean differences.
type SeedComparison struct {
	Seeds int        `json:"seeds"`
	Diff  float64    `json:"diff"` // mean over seeds of each seed's mean(A - B)
	CI95  [2]float64 `json:"ci95"`
	P     float64    `json:"p"`
	PHolm float64    `json:"p_holm"` // Holm across every comparison's seed-level p
}

// Summarize builds the summary of f from its runs' results (any order).
func (f *File) Summarize(results []RunResult) (Summary, error) {
	s := Summary{Experiment: f.Name}
	byArm := map[string][]RunResult{}
	for _, r := range results {
		byArm[r.Arm] = append(byArm[r.Arm], r)
	}
	for _, a := range f.Arms {
		rs := byArm[a.Name]
		slices.SortFunc(rs, func(x, y RunResult) int { return cmp.Compare(x.Seed, y.Seed) })
		as := ArmSummary{Name: a.Name}
		for _, r := range rs {
			rsum := RunSummary{Seed: r.Seed, Run: r.Run, BestStep: r.BestStep, LastStep: r.LastStep, Test: map[string]map[string]TestCell{},
				Validation: r.validationCells()}
			for kind, ev := range r.Tests {
				cells := map[string]TestCell{}
				for _, p := range ev.PerN {
					cells[strconv.Itoa(p.N)] = TestCell{RewardMean: p.RewardMean, DeadlockRate: p.DeadlockRate, MealsMean: p.MealsMean, InvalidRate: p.InvalidRate, Episodes: p.Episodes}
				}
				rsum.Test[kind] = cells
			}
			as.Runs = append(as.Runs, rsum)
		}
		s.Arms = append(s.Arms, as)
	}
	has := func(k string) bool { return slices.Contains(f.Test.Steps, k) }
	add := func(a, ka, b, kb string, n int) error {
		x, y, seeds := pairUp(byArm[a], ka, byArm[b], kb, n)
		if len(x) == 0 {
			return nil
		}
		pr, err := grpo.Paired(y, x) // mean(x - y)
		if err != nil {
			return err
		}
		g, err := grpo.PairedHedgesG(y, x)
		if err != nil {
			return err
		}
		c := Comparison{A: a + "/" + ka, B: b + "/" + kb, N: n, Diff: pr.Diff, CI95: pr.CI95, P: pr.P,
			G: g, Test: "paired-t", Pairs: pr.N}
		if xs, ys := seedMeans(x, y, seeds); len(xs) >= 2 {
			ps, err := grpo.Paired(ys, xs)
			if err != nil {
				return err
			}
			c.BySeed = &SeedComparison{Seeds: ps.N, Diff: ps.Diff, CI95: ps.CI95, P: ps.P}
		}
		s.Comparisons = append(s.Comparisons, c)
		return nil
	}
	for _, n := range f.Test.N {
		for _, a := range f.Arms {
			for _, other := range []string{"last", "base"} {
				if has("best") && has(other) {
					if err := add(a.Name, "best", a.Name, other, n); err != nil {
						return s, err
					}
				}
			}
		}
		for i, a := range f.Arms {
			for _, b := range f.Arms[i+1:] {
				for _, k := range []string{"best", "last"} {
					if has(k) {
						if err := add(a.Name, k, b.Name, k, n); err != nil {
							return s, err
						}
					}
				}
			}
		}
	}
	// Holm's family is the comparisons that were tested: one pair gives
	// no test (p 1 stands for none), and counting it would raise every
	// other Holm p.
	var tested []*Comparison
	var ps []float64
	for i := range s.Comparisons {
		if c := &s.Comparisons[i]; c.Pairs >= 2 {
			tested, ps = append(tested, c), append(ps, c.P)
		} else {
			c.PHolm = 1
		}
	}
	for i, p := range grpo.Holm(ps) {
		tested[i].PHolm = p
	}
	var bySeed []*SeedComparison
	ps = ps[:0]
	for _, c := range s.Comparisons {
		if c.BySeed != nil {
			bySeed, ps = append(bySeed, c.BySeed), append(ps, c.BySeed.P)
		}
	}
	for i, p := range grpo.Holm(ps) {
		bySeed[i].PHolm = p
	}
	return s, nil
}

// seedMeans are, per seed (in the order seeds first appear), the means of
// x and of y over that seed's pairs.
func seedMeans(x, y []float64, seeds []int64) (xs, ys []float64) {
	index := map[int64]int{}
	var counts []float64
	for i, sd := range seeds {
		j, ok := index[sd]
		if !ok {
			j = len(xs)
			index[sd] = j
			xs, ys, counts = append(xs, 0), append(ys, 0), append(counts, 0)
		}
		xs[j] += x[i]
		ys[j] += y[i]
		counts[j]++
	}
	for j, c := range counts {
		xs[j] /= c
		ys[j] /= c
	}
	return xs, ys
}

// pairUp returns the rewards of checkpoint ka of arm runs ra and kb of rb
// at size n on the (run.seed, table) units scored on both sides, and each
// unit's run.seed.
func pairUp(ra []RunResult, ka string, rb []RunResult, kb string, n int) (x, y []float64, seeds []int64) {
	type unit struct{ seed, table int64 }
	other := map[unit]float64{}
	for _, r := range rb {
		for _, e := range r.Tests[kb].Records {
			if e.N == n && !e.Errored {
				other[unit{r.Seed, e.Seed}] = e.Reward
			}
		}
	}
	for _, r := range ra {
		for _, e := range r.Tests[ka].Records {
			if v, ok := other[unit{r.Seed, e.Seed}]; ok && e.N == n && !e.Errored {
				x, y, seeds = append(x, e.Reward), append(y, v), append(seeds, r.Seed)
			}
		}
	}
	return x, y, seeds
}

// ArmTable is one row of the report's per-arm table: a checkpoint kind at
// one table size, across the arm's seeds.
type ArmTable struct {
	Kind         string
	N            int
	Seeds        int
	Reward       grpo.Summary // of the per-seed means: mean and 95% CI across seeds
	DeadlockRate float64      // means across seeds
	MealsMean    float64
	InvalidRate  float64
}

// Table is arm a's rows, by kind then n.
func (s Summary) Table(a ArmSummary, kinds []string, ns []int) []ArmTable {
	var out []ArmTable
	for _, k := range kinds {
		for _, n := range ns {
			var rewards []float64
			row := ArmTable{Kind: k, N: n}
			for _, r := range a.Runs {
				c, ok := r.Test[k][strconv.Itoa(n)]
				if !ok {
					continue
				}
				rewards = append(rewards, c.RewardMean)
				row.DeadlockRate += c.DeadlockRate
				row.MealsMean += c.MealsMean
				row.InvalidRate += c.InvalidRate
			}
			if len(rewards) == 0 {
				continue
			}
			m := float64(len(rewards))
			row.Seeds, row.Reward = len(rewards), grpo.Summarize(rewards)
			row.DeadlockRate, row.MealsMean, row.InvalidRate = row.DeadlockRate/m, row.MealsMean/m, row.InvalidRate/m
			out = append(out, row)
		}
	}
	return out
}

// OptimismRow is one row of the report's validation-vs-test table: a
// checkpoint kind across an arm's seeds.
type OptimismRow struct {
	Kind             string
	Seeds            int
	ValidationReward float64      // mean across seeds
	TestReward       float64      // mean across seeds
	Optimism         grpo.Summary // of the per-seed optimisms: mean and 95% CI across seeds
}

// Optimism is arm a's validation-vs-test rows, in the order of kinds.
func (s Summary) Optimism(a ArmSummary, kinds []string) []OptimismRow {
	var out []OptimismRow
	for _, k := range kinds {
		row := OptimismRow{Kind: k}
		var opt []float64
		for _, r := range a.Runs {
			c, ok := r.Validation[k]
			if !ok {
				continue
			}
			opt = append(opt, c.Optimism)
			row.ValidationReward += c.ValidationReward
			row.TestReward += c.TestReward
		}
		if len(opt) == 0 {
			continue
		}
		m := float64(len(opt))
		row.Seeds, row.Optimism = len(opt), grpo.Summarize(opt)
		row.ValidationReward, row.TestReward = row.ValidationReward/m, row.TestReward/m
		out = append(out, row)
	}
	return out
}

// String names a comparison for the report.
func (c Comparison) String() string { return fmt.Sprintf("%s vs %s at n=%d", c.A, c.B, c.N) }
