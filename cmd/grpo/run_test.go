package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
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
	for _, want := range []string{"STEP", "VALIDATION", "<- best", "paired p = ", " over 8 tables", "best step", "last step"} {
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
	// Resuming a finished run does nothing, says so, and succeeds.
	code, out, errs = cli(t, "run", "--resume", "small", "--db", db)
	if code != 0 || !strings.Contains(errs, "already finished") || !strings.Contains(out, "<- best") {
		t.Fatalf("run --resume of a finished run: exit %d\n%s\n%s", code, out, errs)
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

// TestRunNameTaken: a second run under a stored run's name is refused
// with how to continue that run, once, and the store keeps the first.
func TestRunNameTaken(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	if code, _, errs := cli(t, "run", "--db", db, "--name", "same", "--steps", "1"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, errs)
	}
	code, _, errs := cli(t, "run", "--db", db, "--name", "same", "--steps", "2")
	want := "grpo run: run same: run already exists: continue it with 'grpo run --resume same --db " + db + "', or choose another name with --name\n"
	if code != 1 || errs != want {
		t.Fatalf("second run: exit %d, stderr %q; want exit 1, %q", code, errs, want)
	}
	if _, out, _ := cli(t, "runs", "--db", db, "--json"); strings.Count(out, `"name"`) != 1 || !strings.Contains(out, `"steps": 1`) && !strings.Contains(out, `"steps":1`) {
		t.Fatalf("runs after the refusal: %s", out)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// buildBinary builds grpo once per test process.
func buildBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "grpo-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "grpo")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// waitHealthy waits until the daemon at base (a 'grpo serve' just
// started) answers GET /healthz. The real binary's start — exec, the
// store's check, the listener — takes milliseconds alone, seconds on a
// loaded CI machine: it gets a minute, as the tests' other waits do.
func waitHealthy(t *testing.T, base string) {
	t.Helper()
	up := testutil.Eventually(func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})
	if !up {
		t.Fatalf("the daemon at %s did not come up within %s", base, testutil.Patience)
	}
}

// results is a run's state and per-step results from 'runs show --json':
// what must match between an interrupted and an uninterrupted run (not
// paths or timings).
var jobIDPattern = regexp.MustCompile(`^(.*)\.([0-9a-f]{16})/step-\d{4}$`)

func results(t *testing.T, bin, db, run string) string {
	t.Helper()
	out, err := exec.Command(bin, "runs", "show", run, "--db", db, "--json").Output()
	if err != nil {
		t.Fatalf("runs show: %v", err)
	}
	var s showJSON
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("runs show: %v", err)
	}
	var b strings.Builder
	runID := "" // the run's random id, in every job id; kept on resume
	for i, st := range s.Steps {
		if st.Step != i {
			t.Fatalf("runs show: steps[%d] is step %d: a gap or a duplicate", i, st.Step)
		}
		if st.Job != nil {
			m := jobIDPattern.FindStringSubmatch(st.Job.ID)
			if m == nil || m[1] != run || (runID != "" && m[2] != runID) {
				t.Fatalf("runs show: step %d job id %q: want %s.<the run's id>/step-NNNN, one id for the whole run (first %q)", i, st.Job.ID, run, runID)
			}
			runID = m[2]
			job := *st.Job
			job.ID = strings.Replace(job.ID, runID, "RUNID", 1)
			st.Job = &job
		}
		j, _ := json.Marshal([]any{st.Step, st.N, st.Train, st.Validation, st.Job})
		b.Write(j)
		b.WriteByte('\n')
	}
	return s.State + "\n" + b.String()
}

// TestKillAndResume SIGKILLs the real binary at random moments of a run
// and resumes it until it finishes: the store must hold every step exactly
// once, with the same results as an uninterrupted run.
func TestKillAndResume(t *testing.T) {
	killAndResume(t, "run: {name: k, steps: 10, seed: 5}\nvalidation: {episodes: 24}\n")
}

// TestKillAndResumeAsync is TestKillAndResume with the asynchronous
// pipeline (max_off_policy_steps 1): rollouts sampled ahead are lost at a
// kill and sampled again on resume with the same model, so the store must
// still equal an uninterrupted run's.
func TestKillAndResumeAsync(t *testing.T) {
	killAndResume(t, "run: {name: k, steps: 8, seed: 5}\nvalidation: {episodes: 24}\ngrpo: {max_off_policy_steps: 1}\n")
}

func killAndResume(t *testing.T, config string) {
	dir := t.TempDir()
	bin := buildBinary(t)
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(config), 0o644)
	show := func(db string) string { return results(t, bin, db, "k") }
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
		if attempt == 40 {
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
		// Later attempts wait longer, so a slow machine still progresses:
		// an attempt commits a step only when it outlives the process's
		// start and one step, which a loaded CI machine slowed past the
		// 1.7s the 40th attempt waited when the wait grew by 40ms each
		// time. Growing by a quarter each time, the wait outlasts any
		// such slowdown within the attempts (the 40th waits a minute or more).
		delay := time.Duration(float64(10+rng.IntN(120))*math.Pow(1.25, float64(attempt))) * time.Millisecond
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

// TestKillDaemonMidRun SIGKILLs 'grpo serve' while it plays a run and
// starts it again: the run continues, and its steps (the reward curve)
// have no gaps or duplicates and equal an uninterrupted run's.
func TestKillDaemonMidRun(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	const cfg = "run: {name: d, steps: 8, seed: 4}\nvalidation: {episodes: 24}\n"
	os.WriteFile(filepath.Join(dir, "run.yaml"), []byte(cfg), 0o644)
	refDB := filepath.Join(dir, "ref.db")
	if out, err := exec.Command(bin, "run", "--config", filepath.Join(dir, "run.yaml"), "--db", refDB, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, out)
	}
	want := results(t, bin, refDB, "d")

	db := filepath.Join(dir, "daemon.db")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve", "--addr", addr, "--db", db)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitHealthy(t, "http://"+addr)
		return cmd
	}
	type runState struct {
		State string            `json:"state"`
		Steps []json.RawMessage `json:"steps"`
	}
	get := func() runState {
		var rs runState
		resp, err := http.Get("http://" + addr + "/api/v1/runs/d")
		if err != nil {
			return rs
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(&rs)
		return rs
	}
	daemon := start()
	resp, err := http.Post("http://"+addr+"/api/v1/runs", "application/yaml", strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("launch: %s", resp.Status)
	}
	// Kill it once a few steps are committed, before the run ends.
	progressed := testutil.Eventually(func() bool {
		rs := get()
		if rs.State == "succeeded" {
			t.Fatal("the run finished before it could be killed: make it longer")
		}
		return len(rs.Steps) >= 3
	})
	if !progressed {
		t.Fatalf("the run made no progress within %s", testutil.Patience)
	}
	daemon.Process.Signal(syscall.SIGKILL)
	daemon.Wait()
	start()
	if !testutil.Eventually(func() bool { return get().State == "succeeded" }) {
		t.Fatalf("the restarted daemon did not finish the run within %s: %+v", testutil.Patience, get())
	}
	if got := results(t, bin, db, "d"); got != want {
		t.Fatalf("run after a daemon kill differs from an uninterrupted run:\n%s\nwant\n%s", got, want)
	}
}

// TestResumeKeepsDataDir: a run resumed without --data-dir goes on writing
// its adapters where it wrote them before — here a directory given at its
// start, as a daemon's runs live under <db>.data/<run> — not into the
// store's default beside them.
func TestResumeKeepsDataDir(t *testing.T) {
	dir := t.TempDir()
	db, data := filepath.Join(dir, "x.db"), filepath.Join(dir, "x.db.data", "r")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &testutil.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() {
		// Steps enough that the run cannot end before the cancel lands.
		done <- m.Run(ctx, []string{"run", "--db", db, "--name", "r", "--steps", "8", "--data-dir", data})
	}()
	if !testutil.Eventually(func() bool { return strings.Contains(stderr.String(), "step  1 committed") }) {
		t.Fatalf("step 1 not committed within %s: %s", testutil.Patience, stderr.String())
	}
	cancel()
	if code := <-done; code == 0 {
		t.Fatalf("the interrupted run exited 0: %s", stderr.String())
	}
	if code, _, errs := cli(t, "run", "--resume", "r", "--db", db); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	_, out, _ := cli(t, "runs", "show", "r", "--db", db, "--json")
	var show showJSON
	if err := json.Unmarshal([]byte(out), &show); err != nil {
		t.Fatal(err)
	}
	if show.State != "succeeded" || len(show.Steps) != 9 {
		t.Fatalf("after resume: state %s, %d steps", show.State, len(show.Steps))
	}
	for _, s := range show.Steps[1:] {
		if s.Adapter == nil || filepath.Dir(s.Adapter.Path) != filepath.Join(data, "adapters") {
			t.Errorf("step %d adapter %+v, want it under %s", s.Step, s.Adapter, filepath.Join(data, "adapters"))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.db.data", "adapters")); err == nil {
		t.Error("the resume wrote adapters into the store's default data directory")
	}
}

// TestCompareLinePaired: the end-of-run comparison pairs the two
// validations' episodes by table (n, seed), leaving out errored episodes
// and tables one side lacks; without records it falls back to Welch.
func TestCompareLinePaired(t *testing.T) {
	rec := func(n int, seed int64, r float64, errored bool) checkpoint.EpisodeRecord {
		return checkpoint.EpisodeRecord{N: n, Seed: seed, Reward: r, Errored: errored}
	}
	a := checkpoint.Evaluation{Step: 3, RewardMean: 2.5, Rewards: []float64{1, 2, 4, 9},
		Records: []checkpoint.EpisodeRecord{rec(5, 1, 1, false), rec(5, 2, 2, false), rec(5, 3, 4, false), rec(5, 4, 9, false), rec(5, 5, 7, true)}}
	b := checkpoint.Evaluation{Step: 0, RewardMean: 0.75, Rewards: []float64{0, 1, 1, 5},
		Records: []checkpoint.EpisodeRecord{rec(5, 1, 0, false), rec(5, 2, 1, false), rec(5, 3, 1, false), rec(5, 4, 5, true), rec(5, 5, 0, false)}}
	// Tables 1-3 pair (4 errored in b, 5 errored in a): differences 1, 1,
	// 3: mean 5/3, sd sqrt(4/3), t = 2.5 on 2 df, p = 1 - 2.5/sqrt(8.25)
	// = 0.1296.
	got := compareLine("best", a, "base", b)
	if want := "difference +1.667, paired p = 0.13 over 3 tables"; !strings.HasSuffix(got, want) {
		t.Fatalf("compareLine = %q, want it to end %q", got, want)
	}
	a.Records, b.Records = nil, nil
	if got := compareLine("best", a, "base", b); !strings.Contains(got, "Welch p = ") {
		t.Fatalf("compareLine without records = %q, want Welch", got)
	}
}

// TestResumeOnMovedServers: a run trained against endpoints whose servers
// then moved (the same backend on other ports, as a restarted stack is)
// resumes with 'grpo run --resume RUN --config FILE' on FILE's servers,
// stores them with the run, and refuses a FILE that trains another run.
func TestResumeOnMovedServers(t *testing.T) {
	dir := t.TempDir()
	b := refBackend(t, 1)
	serve := func() (inf, tr *httptest.Server) {
		return httptest.NewServer(b.InferenceHandler()), httptest.NewServer(b.TrainerHandler())
	}
	config := func(inf, tr *httptest.Server, lr string) string {
		file := filepath.Join(t.TempDir(), "run.yaml")
		os.WriteFile(file, []byte(fmt.Sprintf(`run: {name: moved, steps: 2, seed: 2}
inference: {endpoints: [{url: %s/v1}], model: refmodel}
trainer: {kind: jobs, url: %s, base_model: refmodel, hyperparameters: {learning_rate: %s}}
validation: {episodes: 4}
`, inf.URL, tr.URL, lr)), 0o644)
		return file
	}
	db := filepath.Join(dir, "x.db")
	infA, trA := serve()
	if code, _, errs := cli(t, "run", "--config", config(infA, trA, "1.0"), "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	infA.Close()
	trA.Close()

	infB, trB := serve()
	defer infB.Close()
	defer trB.Close()
	code, _, errs := cli(t, "run", "--resume", "moved", "--steps", "4", "--config", config(infB, trB, "0.5"), "--db", db)
	if code != 2 || !strings.Contains(errs, "trains another run than moved (trainer.hyperparameters.learning_rate: 1 (now 0.5))") {
		t.Fatalf("resume with another learning rate: exit %d, want 2 naming the learning rate\n%s", code, errs)
	}
	if code, _, errs := cli(t, "run", "--resume", "moved", "--steps", "4", "--config", config(infB, trB, "1.0"), "--db", db); code != 0 {
		t.Fatalf("resume on the moved servers: exit %d\n%s", code, errs)
	}
	code, out, _ := cli(t, "runs", "show", "moved", "--db", db, "--json")
	var view struct {
		State  string `json:"state"`
		Config struct {
			Inference struct {
				Endpoints []struct{ URL string } `json:"endpoints"`
			} `json:"inference"`
			Trainer struct {
				URL string `json:"url"`
			} `json:"trainer"`
		} `json:"config"`
		Steps []struct {
			Step int `json:"step"`
		} `json:"steps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &view) != nil {
		t.Fatalf("runs show: exit %d\n%s", code, out)
	}
	if view.State != "succeeded" || len(view.Steps) != 5 || view.Steps[4].Step != 4 {
		t.Fatalf("after the resume: state %s, %d steps recorded, want succeeded with steps 0-4", view.State, len(view.Steps))
	}
	if len(view.Config.Inference.Endpoints) != 1 || view.Config.Inference.Endpoints[0].URL != infB.URL+"/v1" || view.Config.Trainer.URL != trB.URL {
		t.Fatalf("stored servers %+v, trainer %s: want the moved ones %s/v1, %s", view.Config.Inference.Endpoints, view.Config.Trainer.URL, infB.URL, trB.URL)
	}
}
