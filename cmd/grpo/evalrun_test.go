package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type evalRunJSON struct {
	Results []struct {
		Model      string `json:"model"`
		Run        string `json:"run"`
		Step       *int   `json:"step"`
		SelectedBy string `json:"selected_by"`
		N          int    `json:"n"`
		Episodes   int    `json:"episodes"`
		Reward     struct {
			Mean float64 `json:"mean"`
		} `json:"reward"`
	} `json:"results"`
}

// TestEvalRunCheckpoints: 'grpo eval --db --run --step' measures a stored
// run's base, best and last checkpoints on the test split of the run's
// config, in the §11 JSON form, the same way every time.
func TestEvalRunCheckpoints(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: held, steps: 3, seed: 2}\nvalidation: {episodes: 6}\ntest: {n: [5, 6], episodes: 4}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	code, runOut, errs := cli(t, "run", "--config", cfg, "--db", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	// With a test section the summary measures best, last and base on it
	// instead of comparing them on the validation episodes that chose best.
	if !strings.Contains(runOut, "test split: 4 tables per n from seed 2000000") || strings.Contains(runOut, "Welch p") || !strings.Contains(runOut, "at n=6: difference") {
		t.Fatalf("run summary with a test section:\n%s", runOut)
	}
	code, out, _ := cli(t, "best", "held", "--db", db, "--json")
	var best struct {
		Step     int `json:"step"`
		LastStep int `json:"last_step"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &best) != nil {
		t.Fatalf("best: %d %s", code, out)
	}
	jsonl := filepath.Join(dir, "test.jsonl")
	code, out, errs = cli(t, "eval", "--db", db, "--run", "held", "--step", "base,best,last,1", "--json", "--out", jsonl)
	if code != 0 {
		t.Fatalf("eval --run: exit %d\n%s", code, errs)
	}
	var got evalRunJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("eval --run --json: %v\n%s", err, out)
	}
	want := []struct {
		by   string
		step int
	}{{"base", 0}, {"base", 0}, {"best", best.Step}, {"best", best.Step}, {"last", 3}, {"last", 3}, {"step", 1}, {"step", 1}}
	if len(got.Results) != len(want) {
		t.Fatalf("eval --run: %d results, want %d (4 checkpoints x n 5, 6):\n%s", len(got.Results), len(want), out)
	}
	for i, r := range got.Results {
		w := want[i]
		if r.Run != "held" || r.Step == nil || *r.Step != w.step || r.SelectedBy != w.by ||
			r.Model != "held@"+itoa(w.step) || r.N != []int{5, 6}[i%2] || r.Episodes != 4 {
			t.Fatalf("result %d = %+v, want run held, step %d, selected_by %s, n %d, 4 episodes", i, r, w.step, w.by, []int{5, 6}[i%2])
		}
	}
	// The end-of-run summary printed the same test results.
	for _, r := range got.Results {
		if r.SelectedBy == "step" {
			continue
		}
		row := fmt.Sprintf("%d  %s step %d  %.3f", r.N, r.SelectedBy, *r.Step, r.Reward.Mean)
		if !strings.Contains(runOut, row) {
			t.Fatalf("run summary lacks %q:\n%s", row, runOut)
		}
	}
	// Every episode played a test table: seeds 2000000..2000003 at each n,
	// 4 checkpoints x 2 sizes x 4 tables, less the repeats when best is last.
	f, err := os.Open(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ep struct {
			Spec struct {
				Env struct {
					N    int   `json:"n"`
					Seed int64 `json:"seed"`
				} `json:"env"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ep); err != nil {
			t.Fatal(err)
		}
		if s := ep.Spec.Env.Seed; s < 2000000 || s > 2000003 {
			t.Fatalf("an episode played table %d, not a test table", s)
		}
		lines++
	}
	wantLines := 4 * 2 * 4
	if best.Step == 3 || best.Step == 1 || best.Step == 0 {
		wantLines -= 2 * 4
	}
	if lines != wantLines {
		t.Fatalf("--out has %d episodes, want %d", lines, wantLines)
	}
	// The measurements are stored: 'runs show' lists them per step and n.
	code, shown, _ := cli(t, "runs", "show", "held", "--db", db)
	if code != 0 || !strings.Contains(shown, "measured on the test split") {
		t.Fatalf("runs show after eval --run:\n%s", shown)
	}
	for _, r := range got.Results {
		row := fmt.Sprintf("%d     %d  4         %.3f", *r.Step, r.N, r.Reward.Mean)
		if !strings.Contains(shown, row) {
			t.Fatalf("runs show lacks the stored test result %q:\n%s", row, shown)
		}
	}
	// And 'runs show --json' carries them: one test evaluation per step
	// measured, in step order, with every episode.
	code, shownJSON, _ := cli(t, "runs", "show", "held", "--db", db, "--json")
	var view struct {
		Tests []struct {
			Split      string `json:"split"`
			Seed       int64  `json:"seed"`
			Evaluation struct {
				Step     int `json:"step"`
				Episodes int `json:"episodes"`
				PerN     []struct {
					N          int     `json:"n"`
					Episodes   int     `json:"episodes"`
					RewardMean float64 `json:"reward_mean"`
				} `json:"per_n"`
				Records []struct {
					N    int   `json:"n"`
					Seed int64 `json:"seed"`
				} `json:"records"`
			} `json:"evaluation"`
		} `json:"tests"`
	}
	if code != 0 || json.Unmarshal([]byte(shownJSON), &view) != nil {
		t.Fatalf("runs show --json: %d\n%.2000s", code, shownJSON)
	}
	var wantSteps []int
	for _, r := range got.Results {
		if !slices.Contains(wantSteps, *r.Step) {
			wantSteps = append(wantSteps, *r.Step)
		}
	}
	slices.Sort(wantSteps)
	if len(view.Tests) != len(wantSteps) {
		t.Fatalf("runs show --json has %d test evaluations, want one per step %v:\n%.3000s", len(view.Tests), wantSteps, shownJSON)
	}
	for i, te := range view.Tests {
		ev := te.Evaluation
		if te.Split != "test" || te.Seed != 2000000 || ev.Step != wantSteps[i] || ev.Episodes != 8 || len(ev.Records) != 8 || len(ev.PerN) != 2 {
			t.Fatalf("test evaluation %d: %+v; want split test, seed 2000000, step %d, 8 episodes and records, 2 sizes", i, te, wantSteps[i])
		}
		for j, rec := range ev.Records {
			if rec.N != []int{5, 6}[j/4] || rec.Seed != 2000000+int64(j%4) {
				t.Fatalf("step %d record %d played n=%d table %d, want n=%d table %d", ev.Step, j, rec.N, rec.Seed, []int{5, 6}[j/4], 2000000+j%4)
			}
		}
		for _, r := range got.Results {
			for _, pn := range ev.PerN {
				if *r.Step == ev.Step && r.N == pn.N && (pn.RewardMean != r.Reward.Mean || pn.Episodes != 4) {
					t.Fatalf("step %d n=%d: runs show --json has %v over %d episodes, eval printed %v over 4", ev.Step, pn.N, pn.RewardMean, pn.Episodes, r.Reward.Mean)
				}
			}
		}
	}
	// The same checkpoints measure the same again; --n and --episodes
	// override the test section.
	code, again, errs := cli(t, "eval", "--db", db, "--run", "held", "--step", "base,best,last,1", "--json")
	if code != 0 || again != out {
		t.Fatalf("a second eval --run differs:\n%s\n%s", out, again)
	}
	if strings.Contains(errs, "note:") {
		t.Fatalf("the same measurement again replaced with a note: %s", errs)
	}
	code, out, errs = cli(t, "eval", "--db", db, "--run", "held", "--step", "last", "--n", "7", "--episodes", "2")
	if code != 0 || !strings.Contains(out, "held@3 (last)  7  2 ") {
		t.Fatalf("eval --run --n 7 --episodes 2: %d\n%s", code, out)
	}
	// Replacing the stored measurement with one of other settings says so.
	if want := "note: step 3's stored test measurement (seed 2000000, n=5: 4 episodes, n=6: 4 episodes) is replaced by this one (seed 2000000, n=7: 2 episodes)"; !strings.Contains(errs, want) {
		t.Fatalf("eval --run --n 7 --episodes 2: stderr %q, want %q", errs, want)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestEvalRunBadInput(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: r, steps: 1}\nvalidation: {episodes: 2}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", db, "--run", "r", "--step", "worst"}, `"worst" is not best, last, base or a step number`},
		{[]string{"--db", db, "--run", "r", "--step", "9"}, "run r has no step 9 (it has steps 0..1)"},
		{[]string{"--db", db, "--run", "nope"}, "nope"},
		{[]string{"--db", filepath.Join(dir, "missing.db"), "--run", "r"}, "missing.db"},
		{[]string{"--run", "r"}, "--run needs --db"},
		{[]string{"--db", db, "--step", "best"}, "need --run"},
		{[]string{"--db", db, "--run", "r", "--reward", "paper"}, "--reward cannot be combined with --run"},
		{[]string{"--db", db, "--run", "r", "--n", "1"}, "--n 1: need at least 2"},
		{[]string{"--db", db, "--run", "r", "--episodes", "0"}, "--episodes 0: need at least 1"},
	} {
		code, _, errs := cli(t, append([]string{"eval"}, tt.args...)...)
		if code == 0 || !strings.Contains(errs, tt.want) {
			t.Errorf("eval %v: exit %d, stderr %q; want an error containing %q", tt.args, code, errs, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); err == nil {
		t.Fatal("eval --run on a missing store created it")
	}
}
