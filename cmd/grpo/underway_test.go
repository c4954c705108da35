package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
)

// underwayJSON is the part of 'runs show --json' about what is under way.
type underwayJSON struct {
	State      string                   `json:"state"`
	Steps      []json.RawMessage        `json:"steps"`
	InFlight   *checkpoint.InFlightView `json:"in_flight"`
	Validating *int                     `json:"validating"`
	Lease      *checkpoint.LeaseView    `json:"lease"`
}

func showUnderway(t *testing.T, db, name string) underwayJSON {
	t.Helper()
	code, out, errs := cli(t, "runs", "show", name, "--db", db, "--json")
	if code != 0 {
		t.Fatalf("runs show --json: exit %d: %s", code, errs)
	}
	var u underwayJSON
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	return u
}

// TestRunsShowUnderway: 'runs show' of a running run says which step is
// being validated and which step's trainer job is in flight (asynchronous
// pipeline: step 2 trains while step 1 validates), and whether a process
// plays the run; it showed the committed steps only.
func TestRunsShowUnderway(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "s.db")
	s := checkpoint.New(db, checkpoint.Options{})
	if err := s.CreateRun(ctx, checkpoint.Run{Name: "u", State: checkpoint.StateRunning, Steps: 4, Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ev := &checkpoint.Evaluation{Step: 0, Episodes: 2, RewardMean: 0.25, Rewards: []float64{0.25, 0.25}}
	if err := s.CommitStep(ctx, "u", checkpoint.Step{Step: 0, N: 5}, ev); err != nil {
		t.Fatal(err)
	}
	at1 := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	at2 := at1.Add(90 * time.Second)
	for _, inf := range []checkpoint.InFlight{
		{Step: 1, N: 5, JobID: "u/step-0001", Submitted: at1},
		{Step: 2, N: 6, JobID: "u/step-0002", Submitted: at2},
	} {
		if err := s.SetInFlight(ctx, "u", inf); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := s.AcquireLease(ctx, "u", checkpoint.LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}

	code, out, errs := cli(t, "runs", "show", "u", "--db", db)
	if code != 0 {
		t.Fatalf("runs show: exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"run u (running): selection",
		"\nstep 1: being validated, not committed yet\n",
		"\nstep 2: trainer job u/step-0002 in flight, submitted " + at2.Local().Format("2006-01-02 15:04:05") + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not playing") {
		t.Errorf("runs show says a run this process plays is not playing:\n%s", out)
	}
	u := showUnderway(t, db, "u")
	if u.InFlight == nil || *u.InFlight != (checkpoint.InFlightView{Step: 2, N: 6, JobID: "u/step-0002", Submitted: at2}) {
		t.Errorf("in_flight %+v, want step 2's job", u.InFlight)
	}
	if u.Validating == nil || *u.Validating != 1 {
		t.Errorf("validating %v, want 1", u.Validating)
	}
	if l := u.Lease; l == nil || l.PID != os.Getpid() || !l.Live {
		t.Errorf("lease %+v, want this process's, live", l)
	}

	// Its process gone without a word (a daemon stopped it to resume
	// later releases the lease and leaves the run running).
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, out, _ = cli(t, "runs", "show", "u", "--db", db)
	for _, want := range []string{
		"run u (running, no process is playing it): selection",
		"\nstep 1: was being validated when the run stopped, not committed\n",
		"\nstep 2: trainer job u/step-0002 submitted " + at2.Local().Format("2006-01-02 15:04:05") + ", not committed (a resume waits for that job)\n",
		"\nnot playing: no process holds its lease; resume it with 'grpo run --resume u --db " + db + "', or a daemon started on this store resumes it\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show after the lease was released lacks %q:\n%s", want, out)
		}
	}
	if u := showUnderway(t, db, "u"); u.Lease != nil {
		t.Errorf("lease %+v after it was released", u.Lease)
	}
}

// TestRunsShowKilledRun: a 'grpo run' killed (SIGKILL) leaves its run
// running in the store; 'runs show' says no live process plays it, its
// last heartbeat, and how to resume it.
func TestRunsShowKilledRun(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "k.db")
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: k, steps: 1000, seed: 5}\nvalidation: {episodes: 4}\n"), 0o644)
	cmd := exec.Command(bin, "run", "--config", cfg, "--db", db, "--quiet")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var shown string // what 'runs show' said last
	committed := testutil.Eventually(func() bool {
		if _, err := os.Stat(db); err != nil {
			return false
		}
		code, out, errs := cli(t, "runs", "show", "k", "--db", db, "--json")
		shown = out + errs
		if code != 0 {
			return false
		}
		var u underwayJSON
		if json.Unmarshal([]byte(out), &u) != nil || len(u.Steps) < 2 {
			return false
		}
		if u.Lease == nil || !u.Lease.Live || u.Lease.PID != cmd.Process.Pid {
			t.Fatalf("lease of a run playing in pid %d: %+v", cmd.Process.Pid, u.Lease)
		}
		return true
	})
	if !committed {
		t.Fatalf("the run committed no training step within %s; runs show said: %.500s", testutil.Patience, shown)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	u := showUnderway(t, db, "k")
	if u.State != checkpoint.StateRunning || u.Lease == nil || u.Lease.Live || u.Lease.PID != cmd.Process.Pid {
		t.Fatalf("state %s, lease %+v; want running with pid %d's lease, not live", u.State, u.Lease, cmd.Process.Pid)
	}
	code, out, errs := cli(t, "runs", "show", "k", "--db", db)
	if code != 0 {
		t.Fatalf("runs show: exit %d: %s", code, errs)
	}
	since := u.Lease.Heartbeat.Local().Format("2006-01-02 15:04:05")
	host, _ := os.Hostname()
	for _, want := range []string{
		"run k (running, no live process: last heartbeat " + since + "): selection",
		fmt.Sprintf("\nnot playing: its process (pid %d on %s) no longer renews its lease (last heartbeat %s); resume it with 'grpo run --resume k --db %s'", cmd.Process.Pid, host, since, db),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("runs show of a killed run lacks %q:\n%s", want, out)
		}
	}
	// grpo best says the same of its state.
	code, out, errs = cli(t, "best", "k", "--db", db)
	if want := "run k (running, no live process: last heartbeat " + since + "): best step"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("grpo best of a killed run: exit %d, stdout lacks %q:\n%s%s", code, want, out, errs)
	}
}
