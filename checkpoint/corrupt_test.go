package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realStore writes a store as runs leave it: three runs, steps with
// evaluations, an in-flight job, a lease; it returns the file's bytes.
func realStore(t *testing.T) []byte {
	t.Helper()
	ctx := context.Background()
	s := New(filepath.Join(t.TempDir(), "grpo.db"), Options{})
	for r := range 3 {
		name := fmt.Sprintf("run-%d", r)
		mustCreateRun(t, s, name)
		for i := 0; i <= 6; i++ {
			if err := s.CommitStep(ctx, name, testStep(i), &Evaluation{Step: i, Episodes: 4, RewardMean: float64(i) / 8, Rewards: []float64{0, 0.25, 0.5, 1}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetInFlight(ctx, name, InFlight{Step: 7, N: 5, JobID: "j", Request: []byte(`{"id":"j"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AcquireLease(ctx, "run-1", LeaseOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCorruptionIsAnError damages copies of a real store file at random
// (bytes overwritten at random places) and reads and writes each with every
// method: none may panic, and an error about the file must name it and
// the recovery.
func TestCorruptionIsAnError(t *testing.T) {
	const trials = 200
	orig := realStore(t)
	rng := rand.New(rand.NewPCG(14, 1))
	dir := t.TempDir()
	outcomes := map[string]int{}
	ctx := context.Background()
	for trial := range trials {
		b := append([]byte(nil), orig...)
		// 1 to 4 damaged spots of 1 to 64 bytes each.
		for range 1 + rng.IntN(4) {
			at, n := rng.IntN(len(b)), 1+rng.IntN(64)
			for i := at; i < min(len(b), at+n); i++ {
				b[i] = byte(rng.IntN(256))
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("c%03d.db", trial))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s := New(path, Options{})
		var errs []error
		check := func(what string, err error) {
			if err == nil {
				return
			}
			errs = append(errs, err)
			if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotDatabase) {
				if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "restore a copy") || !strings.Contains(err.Error(), "bbolt check") {
					t.Errorf("trial %d: %s: %v: want the file named and the recovery suggested", trial, what, err)
				}
			}
		}
		// Check first: the writes below change the file.
		checkErr := s.Check(ctx)
		check("Check", checkErr)
		if checkErr != nil {
			outcomes["Check: damage found"]++
		}
		reads := len(errs)
		list, err := s.ListRuns(ctx)
		check("ListRuns", err)
		for r := range 3 {
			name := fmt.Sprintf("run-%d", r)
			_, _, _, err := s.Snapshot(ctx, name)
			check("Snapshot", err)
			_, err = s.GetRun(ctx, name)
			check("GetRun", err)
			_, _, err = s.LastStep(ctx, name)
			check("LastStep", err)
			_, err = s.GetInFlight(ctx, name)
			check("GetInFlight", err)
			_, _, err = s.GetLease(ctx, name, LeaseOptions{})
			check("GetLease", err)
		}
		// What a read finds, Check finds.
		for _, err := range errs[reads:] {
			if (errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotDatabase)) && checkErr == nil {
				t.Errorf("trial %d: a read found %v; Check found nothing", trial, err)
			}
		}
		check("CreateRun", s.CreateRun(ctx, Run{Name: "new"}))
		check("CommitStep", s.CommitStep(ctx, "run-0", testStep(7), nil))
		check("SetRunState", s.SetRunState(ctx, "run-2", StateFailed, "x"))
		switch {
		case len(errs) == 0:
			outcomes["no error"]++
		case errors.Is(errs[0], ErrCorrupt):
			outcomes["ErrCorrupt"]++
		case errors.Is(errs[0], ErrNotDatabase):
			outcomes["ErrNotDatabase"]++
		default:
			outcomes["other error"]++
		}
		_ = list
	}
	t.Logf("%d corrupted copies: %v", trials, outcomes)
	if outcomes["ErrCorrupt"]+outcomes["ErrNotDatabase"] == 0 {
		t.Fatal("no corruption was detected: the test damages nothing")
	}
}
