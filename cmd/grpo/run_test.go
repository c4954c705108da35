package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const smallRun = `
run: {name: small, steps: 3, seed: 2}
validation: {episodes: 8}
`

type showJSON struct {
	Run   string `json:"run"`
	State string `json:"state"`
	Steps []struct {
		Step       int `json:"step"`
		N          int `json:"n"`
		Validation *struct {
			RewardMean float64    `json:"reward_mean"`
			RewardCI95 [2]float64 `json:"reward_ci95"`
		} `json:"validation"`
		Train *struct {
			RewardMean float64 `json:"reward_mean"`
		} `json:"train"`
		Adapter *struct{ Name, Path string } `json:"adapter"`
		Job     *struct{ ID, State string }  `json:"job"`
	} `json:"steps"`
}

func TestRunThenReadBack(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(smallRun), 0o644)
	db := filepath.Join(dir, "x.db")
	code, out, errs := cli(t, "run", "--config", cfg, "--db", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"STEP", "VALIDATION", "<- best", "Welch p", "best step", "last step"} {
		if !strings.Contains(out, want) {
			t.Fatalf("run output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = cli(t, "runs", "--db", db, "--json")
	var list []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		Steps    int    `json:"steps"`
		BestStep int    `json:"best_step"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Name != "small" || list[0].State != "succeeded" || list[0].Steps != 3 {
		t.Fatalf("runs --json: %d %s", code, out)
	}
	code, out, _ = cli(t, "runs", "show", "small", "--db", db, "--json")
	var show showJSON
	if code != 0 || json.Unmarshal([]byte(out), &show) != nil || len(show.Steps) != 4 {
		t.Fatalf("runs show --json: %d %s", code, out)
	}
	code, out, _ = cli(t, "best", "small", "--db", db, "--json")
	var best struct {
		Run       string                       `json:"run"`
		Policy    string                       `json:"policy"`
		Step      int                          `json:"step"`
		Value     float64                      `json:"value"`
		LastStep  int                          `json:"last_step"`
		LastValue float64                      `json:"last_value"`
		Adapter   *struct{ Name, Path string } `json:"adapter"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &best) != nil {
		t.Fatalf("best --json: %d %s", code, out)
	}
	// best must agree with the validation numbers runs show prints.
	top, topStep := math.Inf(-1), -1
	for _, s := range show.Steps {
		if s.Validation != nil && s.Validation.RewardMean > top {
			top, topStep = s.Validation.RewardMean, s.Step
		}
	}
	if best.Policy != "best-validation" || best.Step != topStep || best.Value != top || best.LastStep != 3 ||
		best.LastValue != show.Steps[3].Validation.RewardMean || best.Step != list[0].BestStep {
		t.Fatalf("best %+v disagrees with runs show (top %v at step %d)", best, top, topStep)
	}
	if topStep > 0 && (best.Adapter == nil || best.Adapter.Name != show.Steps[topStep].Adapter.Name) {
		t.Fatalf("best adapter %+v, step adapter %+v", best.Adapter, show.Steps[topStep].Adapter)
	}
	if code, _, errs := cli(t, "runs", "show", "nope", "--db", db); code != 1 || !strings.Contains(errs, "nope") {
		t.Fatalf("unknown run: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "runs", "--db", filepath.Join(dir, "missing.db")); code != 1 || !strings.Contains(errs, "missing.db") {
		t.Fatalf("missing db: %d %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.db")); err == nil {
		t.Fatal("reading a missing store created it")
	}
}

func TestRunBadConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(cfg, []byte("grpo:\n  grops: 2\n"), 0o644)
	code, _, errs := cli(t, "run", "--config", cfg, "--db", filepath.Join(dir, "x.db"))
	if code != 1 || !strings.Contains(errs, "grpo.grops") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
		t.Fatal("a bad config created the store")
	}
}

// TestKillAndResume SIGKILLs the real binary at random moments of a run
// and resumes it until it finishes: the store must hold every step exactly
// once, with the same results as an uninterrupted run.
func TestKillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "grpo")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: k, steps: 10, seed: 5}\nvalidation: {episodes: 24}\n"), 0o644)

	show := func(db string) string {
		out, err := exec.Command(bin, "runs", "show", "k", "--db", db, "--json").Output()
		if err != nil {
			t.Fatalf("runs show: %v", err)
		}
		var s showJSON
		json.Unmarshal(out, &s)
		// Compare results, not paths or timings.
		var b strings.Builder
		for _, st := range s.Steps {
			j, _ := json.Marshal([]any{st.Step, st.N, st.Train, st.Validation, st.Job})
			b.Write(j)
			b.WriteByte('\n')
		}
		return s.State + "\n" + b.String()
	}
	refDB := filepath.Join(dir, "ref.db")
	if out, err := exec.Command(bin, "run", "--config", cfg, "--db", refDB, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	want := show(refDB)

	db := filepath.Join(dir, "k.db")
	rng := rand.New(rand.NewPCG(7, 7))
	kills := 0
	args := []string{"run", "--config", cfg, "--db", db, "--quiet"}
	for attempt := 0; ; attempt++ {
		if attempt == 25 {
			t.Fatalf("run did not finish after %d attempts", attempt)
		}
		cmd := exec.Command(bin, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		delay := time.Duration(20+rng.IntN(300)) * time.Millisecond
		var err error
		select {
		case err = <-done:
		case <-time.After(delay):
			cmd.Process.Signal(syscall.SIGKILL)
			err = <-done
			kills++
		}
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "killed") {
			t.Fatalf("attempt %d failed on its own: %v\n%s", attempt, err, stderr.String())
		}
		// After the first kill the run exists (or not, if killed before
		// it was created): resume it when it does.
		if _, statErr := os.Stat(db); statErr == nil {
			if out, _ := exec.Command(bin, "runs", "--db", db, "--json").Output(); strings.Contains(string(out), `"k"`) {
				args = []string{"run", "--resume", "k", "--db", db, "--quiet"}
			}
		}
	}
	if kills == 0 {
		t.Fatal("the run was never killed: lower the delays")
	}
	if got := show(db); got != want {
		t.Fatalf("after %d kills the store differs from an uninterrupted run:\n%s\nwant\n%s", kills, got, want)
	}
	t.Logf("finished after %d SIGKILLs", kills)
}
