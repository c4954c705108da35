package experiment

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
)

// WriteReport writes report.md: per arm, checkpoint kind and n, the test
// reward mean with its 95% CI across seeds, deadlock rate, meals and
// invalid rate; then every comparison with p, Holm's p and Hedges' g;
// then the plots (file names in the same directory).
func (f *File) WriteReport(w io.Writer, s Summary, command string, plots []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Experiment %s\n\n", s.Experiment)
	fmt.Fprintf(&b, "Reproduce with `%s`. Arms: %s; seeds (run.seed): %v; runs named `%s/<arm>/<seed>` in `%s`.\n\n",
		command, armNames(f), f.Seeds, f.Name, f.DB)
	fmt.Fprintf(&b, "Test split: %d tables per n from seed %d (never used for training or selection), n = %v; checkpoints: %s.\n\n",
		f.Test.Episodes, f.Test.Seed, f.Test.N, strings.Join(f.Test.Steps, ", "))
	for _, a := range s.Arms {
		fmt.Fprintf(&b, "## Arm %s\n\n", a.Name)
		b.WriteString("| run | best step | last step |\n|---|---|---|\n")
		for _, r := range a.Runs {
			fmt.Fprintf(&b, "| %s | %d | %d |\n", r.Run, r.BestStep, r.LastStep)
		}
		b.WriteString("\n| checkpoint | n | seeds | test reward (mean of seeds) | 95% CI across seeds | deadlock | meals | invalid |\n|---|---|---|---|---|---|---|---|\n")
		for _, row := range s.Table(a, f.Test.Steps, f.Test.N) {
			fmt.Fprintf(&b, "| %s | %d | %d | %.3f | %s | %.2f | %.2f | %.3f |\n", row.Kind, row.N, row.Seeds,
				row.Reward.Mean, ciCell(row.Reward), row.DeadlockRate, row.MealsMean, row.InvalidRate)
		}
		b.WriteString("\n")
		if rows := s.Optimism(a, f.Test.Steps); len(rows) > 0 {
			saw := "the score selection saw"
			if cfg, err := f.Config(a.Name, f.Seeds[0]); err == nil && cfg.Validation.Selection != checkpoint.PolicyBestValidation {
				saw = "not what selection saw: this arm selects by " + string(cfg.Validation.Selection)
			}
			fmt.Fprintf(&b, "Validation vs test: each checkpoint's validation reward (%s) and its test reward on the validation's table sizes (a run whose test split scored none at one of them is left out); optimism = validation − test, mean and 95%% CI across seeds.\n\n", saw)
			b.WriteString("| checkpoint | seeds | validation reward | test reward | optimism | 95% CI across seeds |\n|---|---|---|---|---|---|\n")
			for _, row := range rows {
				fmt.Fprintf(&b, "| %s | %d | %.3f | %.3f | %+.3f | %s |\n", row.Kind, row.Seeds, row.ValidationReward, row.TestReward,
					row.Optimism.Mean, ciCell(row.Optimism))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("## Comparisons\n\n")
	if len(s.Comparisons) == 0 {
		b.WriteString("None (no pair of checkpoints or arms measured on shared tables).\n")
	} else {
		b.WriteString("Paired t-tests of A − B over the (run.seed, test table) units both sides scored; p Holm-corrected across all the comparisons below; Hedges' g of A vs B, paired (standardised by the pooled standard deviation of the two sides' rewards, as an independent-groups g is, not by that of the differences; its small-sample correction on the pairs' degrees of freedom).\n\n")
		b.WriteString("Two units, two questions. The (seed, table) test's p says whether *these trained runs* differ on *these tables*: its units share their tables across seeds and their run within a seed, so it is no evidence that the training choice (an arm, or best vs last) helps beyond these seeds. That is the seed-level test's: a paired t-test over each seed's mean difference (df = seeds − 1), its p Holm-corrected across the comparisons too. Read claims about training choices from the seed columns.\n\n")
		if fns := f.rewardFunctions(); len(fns) > 1 {
			fmt.Fprintf(&b, "The arms score episodes with different reward functions (%s): a comparison of two such arms compares numbers on different scales; their deadlock rates and meals above compare.\n\n", strings.Join(fns, ", "))
		}
		b.WriteString("| A | B | n | pairs | A − B | 95% CI | p | p (Holm) | g | seeds | 95% CI across seeds | p, seeds | p (Holm), seeds |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, c := range s.Comparisons {
			if c.Pairs < 2 {
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %+.3f | - | - | - | - |", c.A, c.B, c.N, c.Pairs, c.Diff)
			} else {
				fmt.Fprintf(&b, "| %s | %s | %d | %d | %+.3f | [%.3f, %.3f] | %.3g | %.3g | %+.2f |", c.A, c.B, c.N, c.Pairs, c.Diff, c.CI95[0], c.CI95[1], c.P, c.PHolm, c.G)
			}
			if sc := c.BySeed; sc != nil {
				fmt.Fprintf(&b, " %d | [%.3f, %.3f] | %.3g | %.3g |\n", sc.Seeds, sc.CI95[0], sc.CI95[1], sc.P, sc.PHolm)
			} else {
				b.WriteString(" 1 | - | - | - |\n")
			}
		}
	}
	if len(plots) > 0 {
		b.WriteString("\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ciCell is a summary's 95% CI as a table cell: "-" for fewer than two
// values, which give no interval (Summarize's [mean, mean] would read as
// a certain mean).
func ciCell(s grpo.Summary) string {
	if s.N < 2 {
		return "-"
	}
	return fmt.Sprintf("[%.3f, %.3f]", s.CI95[0], s.CI95[1])
}

func armNames(f *File) string {
	names := make([]string, len(f.Arms))
	for i, a := range f.Arms {
		names[i] = "`" + a.Name + "`"
	}
	return strings.Join(names, ", ")
}

// rewardFunctions lists, in arm order, the arms' reward functions, each
// once.
func (f *File) rewardFunctions() []string {
	var out []string
	for _, a := range f.Arms {
		cfg, err := f.Config(a.Name, f.Seeds[0])
		if err != nil {
			continue
		}
		fn := string(cfg.Reward.Function)
		if !slices.Contains(out, fn) {
			out = append(out, fn)
		}
	}
	return out
}
