package main

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

type compareRunsOut struct {
	Comparisons []struct {
		N       int        `json:"n"`
		Metric  string     `json:"metric"`
		ModelA  string     `json:"model_a"`
		ModelB  string     `json:"model_b"`
		Pairs   int        `json:"pairs"`
		Diff    float64    `json:"diff"`
		DiffCI  [2]float64 `json:"diff_ci95"`
		Boot95  [2]float64 `json:"boot_ci95"`
		P       float64    `json:"p"`
		PHolm   float64    `json:"p_holm"`
		HedgesG float64    `json:"hedges_g"`
		Test    string     `json:"test"`
		A       struct {
			Mean float64 `json:"mean"`
		} `json:"a"`
	} `json:"comparisons"`
	Runs []struct {
		Run            string `json:"run"`
		Step           int    `json:"step"`
		SelectedBy     string `json:"selected_by"`
		RewardFunction string `json:"reward_function"`
	} `json:"runs"`
	RewardNotCompared string `json:"reward_not_compared"`
}

// episodeMeans reads a 'grpo eval --out' file: per table seed, whether
// the episode deadlocked and its meals.
func episodeMeans(t *testing.T, path string) (deadlock, meals map[int64]float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	deadlock, meals = map[int64]float64{}, map[int64]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ep struct {
			Spec struct {
				Env struct {
					Seed int64 `json:"seed"`
				} `json:"env"`
			} `json:"spec"`
			Metrics struct {
				Deadlocked bool `json:"deadlocked"`
				TotalMeals int  `json:"total_meals"`
			} `json:"metrics"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ep); err != nil {
			t.Fatal(err)
		}
		if ep.Metrics.Deadlocked {
			deadlock[ep.Spec.Env.Seed] = 1
		} else {
			deadlock[ep.Spec.Env.Seed] = 0
		}
		meals[ep.Spec.Env.Seed] = float64(ep.Metrics.TotalMeals)
	}
	return deadlock, meals
}

// TestCompareRuns: 'grpo compare RUN_A RUN_B --db DB' evaluates both runs'
// best checkpoints on the same test tables and compares them table by
// table on reward, deadlock rate, meals and invalid rate. Its reward row is
// the files form's --paired comparison of the same checkpoints' 'grpo eval
// --run --out' records, and its deadlock and meals differences are those
// records' per-table differences averaged by hand. A second comparison
// reuses the stored measurements. Runs scored by different reward functions
// are not compared on reward. Files and run names are told apart by
// whether the path exists.
func TestCompareRuns(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "x.db")
	for _, r := range []struct{ name, extra string }{
		{"ra", "run: {name: ra, steps: 2, seed: 1}\n"},
		{"rb", "run: {name: rb, steps: 2, seed: 2}\n"},
		{"rc", "run: {name: rc, steps: 2, seed: 3}\nreward: {function: paper}\n"},
		{"rd", "run: {name: rd, steps: 2, seed: 4}\nenv: {rounds: 6}\n"},
	} {
		cfg := filepath.Join(dir, r.name+".yaml")
		os.WriteFile(cfg, []byte(r.extra+"validation: {episodes: 4}\ntest: {n: [5], episodes: 3}\n"), 0o644)
		if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
			t.Fatalf("run %s: exit %d\n%s", r.name, code, errs)
		}
	}
	bestStep := func(run string) int {
		code, out, _ := cli(t, "best", run, "--db", db, "--json")
		var best struct{ Step int }
		if code != 0 || json.Unmarshal([]byte(out), &best) != nil {
			t.Fatalf("best %s: %d %s", run, code, out)
		}
		return best.Step
	}

	// 8 tables, not the runs' 3: measured now, not read from the store.
	code, out, errs := cli(t, "compare", "ra", "rb", "--db", db, "--n", "5", "--episodes", "8", "--json")
	if code != 0 {
		t.Fatalf("compare ra rb: exit %d\n%s", code, errs)
	}
	if strings.Contains(errs, "reused") {
		t.Fatalf("compare reused a measurement on other tables:\n%s", errs)
	}
	var got compareRunsOut
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("compare --json: %v\n%s", err, out)
	}
	var metrics []string
	for _, c := range got.Comparisons {
		metrics = append(metrics, c.Metric)
		if c.N != 5 || c.Pairs != 8 || c.Test != "paired-t" || c.PHolm < c.P {
			t.Errorf("comparison %+v: want n 5, 8 pairs, paired-t, Holm p >= p", c)
		}
	}
	if want := []string{"reward", "deadlock_rate", "meals", "invalid_rate"}; !slices.Equal(metrics, want) {
		t.Fatalf("metrics %v, want %v", metrics, want)
	}
	sa, sb := bestStep("ra"), bestStep("rb")
	if len(got.Runs) != 2 || got.Runs[0].Run != "ra" || got.Runs[0].Step != sa || got.Runs[0].SelectedBy != "best" ||
		got.Runs[1].Run != "rb" || got.Runs[1].Step != sb || got.RewardNotCompared != "" {
		t.Fatalf("runs %+v (reward not compared: %q); want ra@%d and rb@%d, best", got.Runs, got.RewardNotCompared, sa, sb)
	}

	// The same checkpoints through 'grpo eval --run --out' and the files
	// form of compare.
	fa, fb := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for run, file := range map[string]string{"ra": fa, "rb": fb} {
		if code, _, errs := cli(t, "eval", "--db", db, "--run", run, "--step", "best", "--n", "5", "--episodes", "8", "--out", file); code != 0 {
			t.Fatalf("eval --run %s: exit %d\n%s", run, code, errs)
		}
	}
	code, out, errs = cli(t, "compare", fa, fb, "--paired", "--json")
	if code != 0 {
		t.Fatalf("compare files: exit %d\n%s", code, errs)
	}
	var files compareRunsOut
	if err := json.Unmarshal([]byte(out), &files); err != nil || len(files.Comparisons) != 1 {
		t.Fatalf("compare files --json: %v\n%s", err, out)
	}
	fr, rr := files.Comparisons[0], got.Comparisons[0]
	if fr.Diff != rr.Diff || fr.DiffCI != rr.DiffCI || fr.Boot95 != rr.Boot95 || fr.P != rr.P || fr.HedgesG != rr.HedgesG || fr.Pairs != 8 {
		t.Fatalf("runs' reward comparison %+v; the files' %+v", rr, fr)
	}
	dla, ma := episodeMeans(t, fa)
	dlb, mb := episodeMeans(t, fb)
	if len(dla) != 8 || len(dlb) != 8 {
		t.Fatalf("eval --out files hold %d and %d tables, want 8", len(dla), len(dlb))
	}
	var dDiff, mDiff float64
	for seed := range dla {
		dDiff += (dlb[seed] - dla[seed]) / 8
		mDiff += (mb[seed] - ma[seed]) / 8
	}
	if math.Abs(got.Comparisons[1].Diff-dDiff) > 1e-12 || math.Abs(got.Comparisons[2].Diff-mDiff) > 1e-12 {
		t.Fatalf("deadlock rate and meals differences %v, %v; the eval records give %v, %v", got.Comparisons[1].Diff, got.Comparisons[2].Diff, dDiff, mDiff)
	}

	// Again, as a table: both measurements are reused, the figures the same.
	code, out, errs = cli(t, "compare", "ra", "rb", "--db", db, "--n", "5", "--episodes", "8")
	if code != 0 || strings.Count(errs, "stored test measurement on these tables is reused") != 2 {
		t.Fatalf("second compare: exit %d, want both measurements reused:\n%s", code, errs)
	}
	for _, want := range []string{"METRIC", "deadlock_rate", "A = ra@" + itoa(sa) + " (best), B = rb@" + itoa(sb) + " (best)"} {
		if !strings.Contains(out, want) {
			t.Fatalf("compare's table lacks %q:\n%s", want, out)
		}
	}

	// A paper run against a shaped one: not on reward.
	code, out, errs = cli(t, "compare", "ra", "rc", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("compare ra rc: exit %d\n%s", code, errs)
	}
	var mixed compareRunsOut
	if err := json.Unmarshal([]byte(out), &mixed); err != nil {
		t.Fatal(err)
	}
	metrics = nil
	for _, c := range mixed.Comparisons {
		metrics = append(metrics, c.Metric)
	}
	if !slices.Equal(metrics, []string{"deadlock_rate", "meals", "invalid_rate"}) || !strings.Contains(mixed.RewardNotCompared, "the paper reward") ||
		!strings.Contains(errs, "reward not compared") || mixed.Runs[1].RewardFunction != "paper" {
		t.Fatalf("shaped vs paper: metrics %v, reward_not_compared %q, stderr:\n%s", metrics, mixed.RewardNotCompared, errs)
	}
	if mixed.Comparisons[0].Pairs != 3 {
		t.Fatalf("shaped vs paper on ra's test section: %d pairs, want its 3 tables", mixed.Comparisons[0].Pairs)
	}

	// Other rules: compared, with a note.
	if code, _, errs := cli(t, "compare", "ra", "rd", "--db", db); code != 0 || !strings.Contains(errs, "the runs play by other rules (ra: 5 rounds, simultaneous, deadlock patience 1; rd: 6 rounds") {
		t.Fatalf("compare ra rd (5 and 6 rounds): exit %d, stderr:\n%s", code, errs)
	}

	// Files and run names.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"ra", "rb"}, "name their store with --db"},
		{[]string{fa, "ra", "--db", db}, fa + " is a file but ra is not"},
		{[]string{fa, fb, "--db", db}, "--db is for comparing two runs"},
		{[]string{"ra", "rb", "--db", db, "--step", "worst"}, `--step "worst"`},
	} {
		code, _, errs := cli(t, append([]string{"compare"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("compare %v: exit %d, stderr %q; want exit 2 saying %q", c.args, code, errs, c.want)
		}
	}
	if _, out, _ := cli(t, "compare", "--help"); !strings.Contains(out, "a file when a file of that path exists, else a run name") {
		t.Errorf("compare --help does not say how files and runs are told apart:\n%s", out)
	}
}
