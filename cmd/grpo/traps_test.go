package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/refmodel"
)

// TestReportValColumnWhenSizesDiffer: a run that trains at n=2 and
// validates at n=5 has a VAL n=5 column, so VALIDATION is not read as
// measured at N; one that validates at the size it trains at has none.
func TestReportValColumnWhenSizesDiffer(t *testing.T) {
	table := func(trainN, valN int) string {
		ev := func(step int) checkpoint.Evaluation {
			return checkpoint.Evaluation{Step: step, Episodes: 2, RewardMean: 0.25, PerN: []checkpoint.EvalN{{N: valN, Episodes: 2, RewardMean: 0.25}}}
		}
		r := &report{
			run:   checkpoint.Run{Name: "r", State: checkpoint.StateSucceeded},
			steps: []checkpoint.Step{{Step: 0, N: trainN}, {Step: 1, N: trainN}},
			evals: map[int]checkpoint.Evaluation{0: ev(0), 1: ev(1)},
		}
		r.evalList = []checkpoint.Evaluation{ev(0), ev(1)}
		var b bytes.Buffer
		r.print(&b)
		return b.String()
	}
	if out := table(2, 5); !strings.Contains(out, "VAL n=5") {
		t.Errorf("trained at n=2, validated at n=5: no VAL n=5 column:\n%s", out)
	}
	if out := table(5, 5); strings.Contains(out, "VAL n=") {
		t.Errorf("trained and validated at n=5: a VAL column:\n%s", out)
	}
}

// TestFlagsTwoDashes: every command's --help lists its flags as they are
// written, with two dashes, and an unknown flag names the nearest one.
func TestFlagsTwoDashes(t *testing.T) {
	for _, c := range commands() {
		code, out, _ := cli(t, c.name, "--help")
		if code != 0 {
			t.Errorf("grpo %s --help: exit %d", c.name, code)
			continue
		}
		_, flags, ok := strings.Cut(out, "\nFlags:\n")
		if !ok {
			t.Errorf("grpo %s --help: no Flags: section\n%s", c.name, out)
			continue
		}
		for _, line := range strings.Split(strings.TrimRight(flags, "\n"), "\n") {
			if line != "" && !strings.HasPrefix(line, "  --") && !strings.HasPrefix(line, "    \t") {
				t.Errorf("grpo %s --help: line %q is not a flag with two dashes or its usage", c.name, line)
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--step", "3"}, "grpo run: unknown flag --step (did you mean --steps?)\n"},
		{[]string{"runs", "--jsn"}, "grpo runs: unknown flag --jsn (did you mean --json?)\n"},
		{[]string{"watch", "--episode"}, "grpo watch: unknown flag --episode (did you mean --episodes?)\n"},
		{[]string{"eval", "--frobnicate"}, "grpo eval: unknown flag --frobnicate (see --help for the flags)\n"},
		{[]string{"run", "--steps", "x"}, "grpo run: invalid value \"x\" for flag --steps: parse error\n"},
		{[]string{"run", "--steps"}, "grpo run: flag needs an argument: --steps\n"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != 2 || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("grpo %v: exit %d, stderr %q; want exit 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// TestNoSuchRunListsRuns: a run name the store does not hold is refused
// with the runs it does hold, the nearest name first, a few of them.
func TestNoSuchRunListsRuns(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "r.db")
	store := checkpoint.New(db, checkpoint.Options{})
	for _, name := range []string{"alpha", "beta", "dp5-shaped-1", "gamma", "delta", "epsilon", "zeta"} {
		if err := store.CreateRun(ctx, checkpoint.Run{Name: name, State: checkpoint.StateSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	want := "run dp5-shaped-2: no such run (did you mean dp5-shaped-1?); the store " + db + " has 7 runs: dp5-shaped-1, alpha, beta, gamma, delta and 2 more ('grpo runs --db " + db + "' lists them)\n"
	for _, args := range [][]string{
		{"best", "dp5-shaped-2", "--db", db},
		{"runs", "show", "dp5-shaped-2", "--db", db},
		{"run", "--resume", "dp5-shaped-2", "--db", db},
	} {
		code, _, errs := cli(t, args...)
		if _, msg, _ := strings.Cut(errs, ": "); code != 1 || msg != want {
			t.Errorf("grpo %v: exit %d, stderr %q\nwant %q", args, code, errs, want)
		}
	}
	code, _, errs := cli(t, "best", "omega", "--db", db)
	if want := "the store " + db + " has 7 runs: alpha, beta, dp5-shaped-1, gamma, delta and 2 more"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("grpo best omega: exit %d, stderr %q; want %q", code, errs, want)
	}
}

// TestResumeExtends: --resume RUN --steps N with N above the run's steps
// continues a finished run to N (its stored config says N); fewer steps,
// or anything else that changes results, is refused.
func TestResumeExtends(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	file := filepath.Join(dir, "run.yaml")
	os.WriteFile(file, []byte("run: {name: ext, steps: 1}\nvalidation: {episodes: 2}\n"), 0o644)
	if code, _, errs := cli(t, "run", "--config", file, "--db", db, "--quiet"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errs)
	}
	code, out, errs := cli(t, "run", "--resume", "ext", "--steps", "2", "--db", db, "--quiet")
	if code != 0 || !strings.Contains(errs, "extending ext from 1 to 2 steps\n") || !strings.Contains(out, "run ext (succeeded)") {
		t.Fatalf("extend: exit %d\n%s\n%s", code, out, errs)
	}
	rec, err := checkpoint.New(db, checkpoint.Options{}).GetRun(context.Background(), "ext")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.FromJSON(rec.Config)
	if err != nil {
		t.Fatal(err)
	}
	last, _, err := checkpoint.New(db, checkpoint.Options{}).LastStep(context.Background(), "ext")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Steps != 2 || cfg.Run.Steps != 2 || last != 2 {
		t.Fatalf("after extending: planned %d, config run.steps %d, last step %d; want 2, 2, 2", rec.Steps, cfg.Run.Steps, last)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", "--resume", "ext", "--steps", "1", "--db", db}, 2, "grpo run: --steps 1: run ext plans 2 steps; with --resume, --steps can only raise them"},
		{[]string{"run", "--resume", "ext", "--seed", "3", "--db", db}, 2, "grpo run: --resume uses the run's stored config: drop --name and --seed"},
		{[]string{"run", "--resume", "ext", "--steps", "2", "--db", db, "--quiet"}, 0, "run ext already finished all its 2 steps"},
	} {
		code, _, errs := cli(t, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.want) {
			t.Errorf("grpo %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errs, tc.code, tc.want)
		}
	}
}

// TestRefmodelRateWarnings: a run against the reference backend served on
// its own ('grpo refmodel serve': endpoints and a jobs trainer) with the
// study's learning rate, 5e-6, is warned at its start that the rate is
// far from what that backend learns with, and at its end that no trained
// adapter changed a validation episode, each once (the run's warnings, on
// its log); with the backend's own rate neither warning comes.
func TestRefmodelRateWarnings(t *testing.T) {
	b := refBackend(t, 1)
	inf := httptest.NewServer(b.InferenceHandler())
	t.Cleanup(inf.Close)
	tr := httptest.NewServer(b.TrainerHandler())
	t.Cleanup(tr.Close)
	dir := t.TempDir()
	for i, lr := range []float64{5.0e-6, refmodel.DefaultLearningRate} {
		cfg := filepath.Join(dir, "run.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: lr%d, steps: 6, seed: 4}
validation: {episodes: 4}
inference: {model: %s, endpoints: [{url: %s/v1}]}
trainer: {kind: jobs, url: %s, base_model: %s, hyperparameters: {learning_rate: %v}}
`, i, refmodel.BaseModelName, inf.URL, tr.URL, refmodel.BaseModelName, lr)), 0o644)
		code, out, errs := cli(t, "run", "--config", cfg, "--db", filepath.Join(dir, "r.db"), "--quiet")
		if code != 0 {
			t.Fatalf("learning rate %v: exit %d\n%s\n%s", lr, code, out, errs)
		}
		start := strings.Count(errs, "trainer.hyperparameters.learning_rate 5e-06 is far from what the reference backend learns with")
		end := strings.Count(errs, "no trained adapter changed a validation episode: at each of the 6 steps validated after step 0, every table ended exactly as the base model's did")
		want := 0
		if lr != refmodel.DefaultLearningRate {
			want = 1
		}
		if start != want || end != want {
			t.Errorf("learning rate %v: start warning %d times, end warning %d times; want %d:\n%s", lr, start, end, want, errs)
		}
	}
}

// TestTestSplitAtTrainSizes: the test split of a run that trains at n=3
// and validates at n=5 is measured at n=3 wherever test.n is left out:
// by the end-of-run summary of a config whose test section sets other
// keys, and by grpo eval --run on a run whose config has no test section.
func TestTestSplitAtTrainSizes(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "r.db")
	sizes := func(run string) []int {
		t.Helper()
		code, out, errs := cli(t, "eval", "--db", db, "--run", run, "--step", "base", "--episodes", "2", "--json")
		var got evalRunJSON
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
			t.Fatalf("eval --run %s: exit %d\n%s\n%s", run, code, out, errs)
		}
		var ns []int
		for _, r := range got.Results {
			ns = append(ns, r.N)
		}
		return ns
	}
	for _, tc := range []struct {
		name, test string
		summary    bool // the end-of-run summary measures the test split
	}{
		{"asked", "test: {episodes: 2}\n", true},
		{"unasked", "", false},
	} {
		file := filepath.Join(dir, tc.name+".yaml")
		os.WriteFile(file, []byte("run: {name: "+tc.name+", steps: 1}\nenv: {n: 3}\nvalidation: {n: [5], episodes: 2}\n"+tc.test), 0o644)
		code, out, errs := cli(t, "run", "--config", file, "--db", db, "--quiet")
		if code != 0 {
			t.Fatalf("%s: run: exit %d\n%s\n%s", tc.name, code, out, errs)
		}
		if got := strings.Contains(out, "test split: 2 tables per n from seed 2000000"); got != tc.summary {
			t.Errorf("%s: the summary measures the test split: %v, want %v\n%s", tc.name, got, tc.summary, out)
		}
		if tc.summary && !strings.Contains(out, "\n3  best step") {
			t.Errorf("%s: the summary's test table is not at n=3:\n%s", tc.name, out)
		}
		if got := sizes(tc.name); !slices.Equal(got, []int{3}) {
			t.Errorf("%s: eval --run measured at n=%v, want [3]", tc.name, got)
		}
	}
}
