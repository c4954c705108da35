package main

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/rollout"
)

func TestBareGrpoPrintsUsageAndExits2(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	code, out, errs := cli(t)
	if code != 2 || out != "" || !strings.Contains(errs, "Usage:") || !strings.Contains(errs, "grpo run") {
		t.Fatalf("exit %d\nstdout %q\nstderr %s", code, out, errs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("bare grpo wrote files: %v", entries)
	}
}

// TestParseInterleaved checks that flags may sit anywhere among the
// positional arguments, and that "--" ends them.
func TestParseInterleaved(t *testing.T) {
	for _, c := range []struct {
		args []string
		pos  []string
		json bool
		db   string
	}{
		{[]string{"a", "b", "--json"}, []string{"a", "b"}, true, ""},
		{[]string{"--json", "a", "b"}, []string{"a", "b"}, true, ""},
		{[]string{"show", "r", "--db", "x.db", "--json"}, []string{"show", "r"}, true, "x.db"},
		{[]string{"r", "--db=x.db"}, []string{"r"}, false, "x.db"},
		{[]string{"a", "--db", "x", "b", "--", "--json", "c"}, []string{"a", "b", "--json", "c"}, false, "x"},
		{nil, nil, false, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		j := fs.Bool("json", false, "")
		db := fs.String("db", "", "")
		if err := parse(fs, c.args); err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !slices.Equal(fs.Args(), c.pos) || *j != c.json || *db != c.db {
			t.Errorf("%q: args %q json %v db %q; want %q %v %q", c.args, fs.Args(), *j, *db, c.pos, c.json, c.db)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	err := parse(fs, []string{"a", "--nope"})
	if _, ok := err.(*usageError); !ok || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("bad flag after an argument: %v", err)
	}
}

// writeEpisodes writes an eval --out file: rewards per n for model.
func writeEpisodes(t *testing.T, path, model string, rewards map[int][]float64) {
	t.Helper()
	var b strings.Builder
	for n, rs := range rewards {
		for _, r := range rs {
			ep := rollout.Episode{Reward: r}
			ep.Spec.Model, ep.Spec.Env.N = model, n
			line, _ := json.Marshal(ep)
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCompareFlagsAfterFilesAndUnmatchedN(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	writeEpisodes(t, a, "ma", map[int][]float64{5: {1, 2, 3}, 10: {0, 1}})
	writeEpisodes(t, b, "mb", map[int][]float64{5: {2, 3, 4}, 15: {1, 1, 2}})
	code, out, errs := cli(t, "compare", a, b, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got compareJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// Only n=5 is in both: means 2 and 3, B-A = 1.
	if len(got.Comparisons) != 1 || got.Comparisons[0].N != 5 || got.Comparisons[0].Diff != 1 {
		t.Fatalf("comparisons %+v", got.Comparisons)
	}
	want := []unmatchedN{{N: 10, File: a, Episodes: 2}, {N: 15, File: b, Episodes: 3}}
	if !slices.Equal(got.Unmatched, want) {
		t.Fatalf("unmatched %+v, want %+v", got.Unmatched, want)
	}
	for _, w := range []string{"n=10 has 2 scored episode(s) only in " + a, "n=15 has 3 scored episode(s) only in " + b} {
		if !strings.Contains(errs, w) {
			t.Errorf("stderr lacks %q:\n%s", w, errs)
		}
	}
	// The table form says it too.
	code, out, errs = cli(t, "compare", a, "--json=false", b)
	if code != 0 || !strings.Contains(out, "HEDGES G") || !strings.Contains(errs, "n=10") {
		t.Fatalf("table: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestReadCommandsNameAMissingStore(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.db")
	for _, args := range [][]string{
		{"runs", "--db", missing, "--json"},
		{"runs", "show", "r", "--db", missing},
		{"best", "r", "--db", missing},
		{"best", "--db", missing, "--json"},
	} {
		code, out, errs := cli(t, args...)
		if code != 1 || out != "" || !strings.Contains(errs, missing) || !strings.Contains(errs, "does not exist") {
			t.Errorf("%q: exit %d stdout %q stderr %s", args, code, out, errs)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("reading created the store")
	}
}

// failedRun makes a store holding run "f" that failed after step 1.
func failedRun(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "s.db")
	ctx := context.Background()
	s := checkpoint.New(db, checkpoint.Options{})
	if err := s.CreateRun(ctx, checkpoint.Run{Name: "f", Steps: 4, Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for i, mean := range []float64{0.25, 0.5} {
		st := checkpoint.Step{Step: i, N: 5}
		if i > 0 {
			st.Train = &checkpoint.TrainStats{RewardMean: 0.1}
		}
		ev := &checkpoint.Evaluation{Step: i, Episodes: 2, RewardMean: mean, Rewards: []float64{mean, mean}}
		if err := s.CommitStep(ctx, "f", st, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetRunState(ctx, "f", checkpoint.StateFailed, "trainer: connection refused"); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestBestAndShowOnAFailedRun(t *testing.T) {
	db := failedRun(t)
	for _, args := range [][]string{{"best", "f", "--db", db}, {"best", "--db", db, "--json"}} {
		code, out, errs := cli(t, args...)
		if code != 1 || out != "" || !strings.Contains(errs, "run f failed: trainer: connection refused") || !strings.Contains(errs, "best committed step was 1") {
			t.Errorf("%q: exit %d stdout %q stderr %s", args, code, out, errs)
		}
	}
	code, out, errs := cli(t, "runs", "show", "f", "--db", db)
	if code != 0 || !strings.Contains(out, "run f (failed)") || !strings.Contains(out, "error: trainer: connection refused") {
		t.Fatalf("runs show: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestURLFlagsWithoutSchemeNameTheFlag(t *testing.T) {
	code, _, errs := cli(t, "eval", "--base-url", "127.0.0.1:8000/v1", "--model", "m")
	if code != 2 || !strings.Contains(errs, `--base-url "127.0.0.1:8000/v1": want an http:// or https:// URL`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	models := filepath.Join(t.TempDir(), "models.yaml")
	os.WriteFile(models, []byte("- {name: m, url: localhost:8000/v1}\n"), 0o644)
	code, _, errs = cli(t, "eval", "--models", models)
	if code == 0 || !strings.Contains(errs, `entry 1 (m): url "localhost:8000/v1"`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "serve", "--grafana-url", "grafana:3000", "--db", filepath.Join(t.TempDir(), "d.db"))
	if code != 2 || !strings.Contains(errs, `--grafana-url "grafana:3000": want an http:// or https:// URL`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "watch", "--addr", "localhost")
	if code != 2 || !strings.Contains(errs, `--addr "localhost": want the daemon's HOST:PORT`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestBadFlagLeavesStdoutEmpty checks that a flag the parser refuses
// (unknown, or a value of the wrong type) is reported on stderr only:
// the usage text belongs to --help, and stdout may be a pipe into jq.
func TestBadFlagLeavesStdoutEmpty(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, args := range [][]string{
		{"compare", "a.jsonl", "b.jsonl", "--json", "--bogus"},
		{"run", "--steps", "abc"},
		{"runs", "--jsn"},
		{"eval", "--episodes", "x"},
		{"version", "--x"},
	} {
		code, out, errs := cli(t, args...)
		if code != 2 || out != "" || !strings.Contains(errs, "Run 'grpo "+args[0]+" --help'") {
			t.Errorf("grpo %q: exit %d\nstdout %.80q...\nstderr %q\nwant exit 2, empty stdout, the error on stderr", args, code, out, errs)
		}
	}
	// --help still prints the usage on stdout.
	if code, out, _ := cli(t, "run", "--help"); code != 0 || !strings.Contains(out, "Usage: grpo run") || !strings.Contains(out, "-steps") {
		t.Errorf("grpo run --help: exit %d\n%s", code, out)
	}
}

// TestReadBackHintsNameTheStore: the commands grpo run and grpo best
// suggest for reading a run back name its store when it is not the
// default grpo.db, so that they work as printed.
func TestReadBackHintsNameTheStore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "other.db")
	code, out, errs := cli(t, "run", "--db", db, "--steps", "1", "--quiet")
	want := "read back with 'grpo runs show dp5-shaped-1 --db " + db + "' and 'grpo best dp5-shaped-1 --db " + db + "'"
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("grpo run --db %s: exit %d, stdout lacks %q:\n%s\n%s", db, code, want, out, errs)
	}
	failed := failedRun(t)
	code, _, errs = cli(t, "best", "f", "--db", failed)
	if want := "see 'grpo runs show f --db " + failed + "'"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("grpo best of a failed run: exit %d, stderr lacks %q:\n%s", code, want, errs)
	}
}
