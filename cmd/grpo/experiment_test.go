package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tinyExperiment = `experiment: {name: tiny, seeds: [1, 2]}
base: {run: {steps: 2}, validation: {episodes: 4}}
arms:
  - {name: shaped, set: {reward: {function: shaped}}}
  - {name: lazy, set: {reward: {function: paper}, grpo: {groups: 1}}}
test: {n: [5], episodes: 4}
`

// TestExperiment runs a two-arm, two-seed experiment: summary.json agrees
// with 'grpo best' and the stored test results for every run, report.md
// names both arms, and a second run of the file trains and measures
// nothing.
func TestExperiment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "e.yaml")
	os.WriteFile(file, []byte(tinyExperiment), 0o644)
	code, out, errs := cli(t, "experiment", file, "--json")
	if code != 0 {
		t.Fatalf("experiment: exit %d\n%s", code, errs)
	}
	var sum struct {
		Experiment string `json:"experiment"`
		Arms       []struct {
			Name string `json:"name"`
			Runs []struct {
				Seed     int64  `json:"seed"`
				Run      string `json:"run"`
				BestStep int    `json:"best_step"`
				LastStep int    `json:"last_step"`
				Test     map[string]map[string]struct {
					RewardMean float64 `json:"reward_mean"`
					Episodes   int     `json:"episodes"`
				} `json:"test"`
				Validation map[string]struct {
					Step             int     `json:"step"`
					ValidationReward float64 `json:"validation_reward"`
					TestReward       float64 `json:"test_reward"`
					Optimism         float64 `json:"optimism"`
				} `json:"validation"`
			} `json:"runs"`
		} `json:"arms"`
		Comparisons []struct {
			A, B  string
			N     int     `json:"n"`
			P     float64 `json:"p"`
			PHolm float64 `json:"p_holm"`
			Pairs int     `json:"pairs"`
			Test  string  `json:"test"`
		} `json:"comparisons"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	file2, _ := os.ReadFile(filepath.Join(dir, "tiny", "summary.json"))
	var onDisk any
	if json.Unmarshal(file2, &onDisk) != nil {
		t.Fatalf("summary.json on disk is not JSON:\n%s", file2)
	}
	db := filepath.Join(dir, "tiny.db")
	if sum.Experiment != "tiny" || len(sum.Arms) != 2 || sum.Arms[0].Name != "shaped" || sum.Arms[1].Name != "lazy" {
		t.Fatalf("summary: %+v", sum)
	}
	for _, a := range sum.Arms {
		if len(a.Runs) != 2 {
			t.Fatalf("arm %s has %d runs, want 2", a.Name, len(a.Runs))
		}
		for i, r := range a.Runs {
			if want := "tiny/" + a.Name + "/" + itoa(int([]int64{1, 2}[i])); r.Run != want || r.Seed != []int64{1, 2}[i] {
				t.Fatalf("run %+v, want %s", r, want)
			}
			code, bout, _ := cli(t, "best", r.Run, "--db", db, "--json")
			var best struct {
				Step     int     `json:"step"`
				LastStep int     `json:"last_step"`
				Value    float64 `json:"value"`
			}
			if code != 0 || json.Unmarshal([]byte(bout), &best) != nil || best.Step != r.BestStep || best.LastStep != r.LastStep || r.LastStep != 2 {
				t.Fatalf("summary says %s best %d last %d; grpo best says %s", r.Run, r.BestStep, r.LastStep, bout)
			}
			// The chosen step's validation score is the one 'grpo best'
			// chose on; validation and test are both at n=5 here, so its
			// test score is the test cell's and the optimism their
			// difference.
			v := r.Validation["best"]
			if v.Step != best.Step || v.ValidationReward != best.Value || v.TestReward != r.Test["best"]["5"].RewardMean ||
				math.Abs(v.Optimism-(v.ValidationReward-v.TestReward)) > 1e-12 {
				t.Fatalf("%s validation vs test %+v; grpo best %s; test %+v", r.Run, v, bout, r.Test["best"]["5"])
			}
			// The summary's test figures are the ones 'grpo eval --run'
			// measures for the same checkpoints.
			code, eout, _ := cli(t, "eval", "--db", db, "--run", r.Run, "--step", "base,best,last", "--n", "5", "--episodes", "4", "--json")
			var ev evalRunJSON
			if code != 0 || json.Unmarshal([]byte(eout), &ev) != nil || len(ev.Results) != 3 {
				t.Fatalf("eval --run %s: %d %s", r.Run, code, eout)
			}
			for _, e := range ev.Results {
				cell := r.Test[e.SelectedBy]["5"]
				if cell.Episodes != 4 || cell.RewardMean != e.Reward.Mean {
					t.Fatalf("%s %s: summary %+v, eval --run %v", r.Run, e.SelectedBy, cell, e.Reward.Mean)
				}
			}
		}
	}
	// best vs last, best vs base per arm; shaped vs lazy for best and last.
	if len(sum.Comparisons) != 6 {
		t.Fatalf("%d comparisons, want 6: %+v", len(sum.Comparisons), sum.Comparisons)
	}
	for _, c := range sum.Comparisons {
		if c.Test != "paired-t" || c.Pairs != 8 || c.N != 5 || c.PHolm < c.P || c.PHolm > 1 {
			t.Fatalf("comparison %+v: want paired-t over 2 seeds x 4 tables, Holm p >= p", c)
		}
	}
	report, err := os.ReadFile(filepath.Join(dir, "tiny", "report.md"))
	if err != nil || !strings.Contains(string(report), "## Arm shaped") || !strings.Contains(string(report), "## Arm lazy") || !strings.Contains(string(report), "p (Holm)") ||
		!strings.Contains(string(report), "optimism = validation − test") {
		t.Fatalf("report.md: %v\n%s", err, report)
	}

	for _, png := range []string{"curves.png", "test.png"} {
		b, err := os.ReadFile(filepath.Join(dir, "tiny", png))
		if err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" || !strings.Contains(string(report), "]("+png+")") {
			t.Fatalf("plot %s: %v, %d bytes; report links it: %v", png, err, len(b), strings.Contains(string(report), png))
		}
	}
	// Again: nothing trained, nothing measured, the same summary.
	code, again, errs := cli(t, "experiment", file, "--json")
	if code != 0 || again != out {
		t.Fatalf("second run: exit %d, summary changed\n%s\n%s", code, errs, again)
	}
	if strings.Count(errs, "reused (already finished)") != 4 || strings.Count(errs, "test results reused") != 4 || strings.Contains(errs, "committed") {
		t.Fatalf("second run trained or measured something:\n%s", errs)
	}
	code, list, _ := cli(t, "runs", "--db", db, "--json")
	var runs []struct{ Name string }
	if code != 0 || json.Unmarshal([]byte(list), &runs) != nil || len(runs) != 4 {
		t.Fatalf("runs after two experiment runs: %s", list)
	}

	// Another test split trains nothing again: the runs are the same.
	os.WriteFile(file, []byte(strings.Replace(tinyExperiment, "test: {n: [5], episodes: 4}", "test: {n: [5], episodes: 3}", 1)), 0o644)
	if code, _, errs := cli(t, "experiment", file, "--json"); code != 0 || strings.Count(errs, "reused (already finished)") != 4 || strings.Contains(errs, "committed") {
		t.Fatalf("another test split: exit %d, trained again:\n%s", code, errs)
	}
	// Other timeouts, retries and concurrency (what an older grpo's
	// defaults may also have given) train nothing again either.
	os.WriteFile(file, []byte(strings.Replace(tinyExperiment, "validation: {episodes: 4}}", "validation: {episodes: 4}, inference: {retry_budget: 30s, retries: 1, concurrency: 7, request_timeout: 1m}, trainer: {job_timeout: 3m}}", 1)), 0o644)
	if code, _, errs := cli(t, "experiment", file, "--json"); code != 0 || strings.Count(errs, "reused (already finished)") != 4 || strings.Contains(errs, "committed") {
		t.Fatalf("other retries and timeouts: exit %d, trained again:\n%s", code, errs)
	}
	// Another training config is refused, naming what changed.
	os.WriteFile(file, []byte(strings.Replace(tinyExperiment, "validation: {episodes: 4}", "validation: {episodes: 5}", 1)), 0o644)
	code, _, errs = cli(t, "experiment", file)
	if code != 1 || !strings.Contains(errs, "run tiny/shaped/1: the run's training config changed: the store "+db+" holds run tiny/shaped/1 trained with validation.episodes: 4 (now 5)") ||
		strings.Contains(errs, "rerun the same command") {
		t.Fatalf("changed training config: exit %d\n%s", code, errs)
	}
}

func TestExperimentBadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ file, want string }{
		{"experiment: {name: x}\narms: [{name: a}]\n", "experiment.seeds is empty"},
		{"experiment: {name: x, seeds: [1, 1]}\narms: [{name: a}]\n", "lists 1 twice"},
		{"experiment: {name: x/y, seeds: [1]}\narms: [{name: a}]\n", `experiment.name "x/y"`},
		{"experiment: {name: x, seeds: [1]}\n", "arms is empty"},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a}, {name: a}]\n", "two arms are named a"},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a, set: {grpo: {grops: 2}}}]\n", "grpo.grops"},
		{"experiment: {name: x, seeds: [1]}\narms: [{name: a}]\ntest: {steps: [best, worst]}\n", `"worst" is not one of base, best, last`},
		{"experiment: {name: x, seeds: [1]}\narm: []\n", "line 2, column 1: arm: unknown key (did you mean arms?); accepted: experiment, base, arms, test"},
	} {
		p := filepath.Join(dir, "bad.yaml")
		os.WriteFile(p, []byte(tt.file), 0o644)
		code, _, errs := cli(t, "experiment", p)
		if code == 0 || !strings.Contains(errs, tt.want) {
			t.Errorf("experiment %q: exit %d, %q; want an error containing %q", tt.file, code, errs, tt.want)
		}
	}
}

// TestExperimentFlags: --db and --out take the place of the file's
// experiment.db and experiment.out (nothing is written beside the file),
// and the last line names every file written: report.md, summary.json and
// each plot.
func TestExperimentFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "e.yaml")
	os.WriteFile(file, []byte(`experiment: {name: flags, seeds: [1], db: file.db, out: file-out}
base: {run: {steps: 1}, validation: {episodes: 2}}
arms:
  - {name: shaped, set: {reward: {function: shaped}}}
test: {n: [5], episodes: 2}
`), 0o644)
	db, out := filepath.Join(dir, "flag.db"), filepath.Join(dir, "flag-out")
	code, stdout, errs := cli(t, "experiment", file, "--db", db, "--out", out)
	if code != 0 {
		t.Fatalf("experiment --db --out: exit %d\n%s", code, errs)
	}
	var files []string
	for _, f := range []string{"report.md", "summary.json", "curves.png", "test.png"} {
		files = append(files, filepath.Join(out, f))
	}
	if want := "experiment flags: 1 runs in " + db + "; wrote " + strings.Join(files, ", ") + "\n"; stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	for _, f := range append(files, db) {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	for _, f := range []string{"file.db", "file-out"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			t.Errorf("%s written beside the file although the flags name other places", f)
		}
	}
}

// TestExperimentServersMoved: an experiment trained against endpoints is
// the same experiment once its servers moved (the same backend on other
// ports, as a restarted stack is): run again with the new addresses, it
// trains and measures nothing again.
func TestExperimentServersMoved(t *testing.T) {
	dir := t.TempDir()
	b := refBackend(t, 1)
	file := filepath.Join(dir, "e.yaml")
	play := func() (code int, errs string) {
		inf, tr := httptest.NewServer(b.InferenceHandler()), httptest.NewServer(b.TrainerHandler())
		defer inf.Close()
		defer tr.Close()
		os.WriteFile(file, []byte(fmt.Sprintf(`experiment: {name: moved, seeds: [1]}
base:
  run: {steps: 2}
  validation: {episodes: 4}
  inference: {endpoints: [{url: %s/v1}], model: refmodel}
  trainer: {kind: jobs, url: %s, base_model: refmodel, hyperparameters: {learning_rate: 1.0}}
arms: [{name: shaped, set: {reward: {function: shaped}}}]
test: {n: [5], episodes: 2}
`, inf.URL, tr.URL)), 0o644)
		code, _, errs = cli(t, "experiment", file)
		return code, errs
	}
	if code, errs := play(); code != 0 || !strings.Contains(errs, "moved/shaped/1: trained") {
		t.Fatalf("experiment: exit %d\n%s", code, errs)
	}
	if code, errs := play(); code != 0 || !strings.Contains(errs, "reused (already finished)") || !strings.Contains(errs, "test results reused") {
		t.Fatalf("the same experiment on moved servers: exit %d, want its run and test results reused\n%s", code, errs)
	}
}
