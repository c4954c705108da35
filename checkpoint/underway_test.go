package checkpoint

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSetUnderway: a running run's view says which step's trainer job is
// in flight and which step is being validated, from the in-flight record
// as SetInFlight and CommitStep leave it.
func TestSetUnderway(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	job := func(s int) InFlight {
		return InFlight{Step: s, N: 5, JobID: "r/step-000" + itoaTest(s), Submitted: at.Add(time.Duration(s) * time.Minute)}
	}
	set := func(s *Store, steps ...int) {
		t.Helper()
		for _, step := range steps {
			if err := s.SetInFlight(ctx, "r", job(step)); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit := func(s *Store, step int) {
		t.Helper()
		if err := s.CommitStep(ctx, "r", Step{Step: step, N: 5, Committed: at}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name       string
		play       func(s *Store) // after step 0 is committed
		state      string
		job        int // the step of the job in flight, 0: none
		validating int // 0: none
	}{
		{"no job in flight", func(s *Store) {}, StateRunning, 0, 0},
		{"a step's job (training, or validating)", func(s *Store) { set(s, 1) }, StateRunning, 1, 0},
		{"the next step's job while a step validates", func(s *Store) { set(s, 1, 2) }, StateRunning, 2, 1},
		{"the next step's job while a step without one validates", func(s *Store) { set(s, 2) }, StateRunning, 2, 1},
		{"the validated step committed", func(s *Store) {
			set(s, 1, 2)
			commit(s, 1)
		}, StateRunning, 2, 0},
		{"a failed run's record is not under way", func(s *Store) {
			set(s, 1)
			if err := s.SetRunState(ctx, "r", StateFailed, "boom"); err != nil {
				t.Fatal(err)
			}
		}, StateFailed, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := mustOpen(t)
			if err := s.CreateRun(ctx, Run{Name: "r", State: StateRunning}); err != nil {
				t.Fatal(err)
			}
			commit(s, 0)
			c.play(s)
			u, err := s.GetUnderway(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			if u.Lease != nil || u.Live {
				t.Errorf("lease %+v (live %v) of a run no process holds", u.Lease, u.Live)
			}
			run, steps, evals, err := s.Snapshot(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			if run.State != c.state {
				t.Fatalf("state %s, want %s", run.State, c.state)
			}
			v := NewRunView(run, steps, evals)
			v.SetUnderway(u)
			switch {
			case c.job == 0 && v.InFlight != nil:
				t.Errorf("in flight %+v, want none", *v.InFlight)
			case c.job > 0 && v.InFlight == nil:
				t.Errorf("no job in flight, want step %d's", c.job)
			case c.job > 0:
				want := InFlightView{Step: c.job, N: 5, JobID: "r/step-000" + itoaTest(c.job), Submitted: at.Add(time.Duration(c.job) * time.Minute)}
				if got := *v.InFlight; got != want {
					t.Errorf("in flight %+v, want %+v", got, want)
				}
			}
			switch {
			case c.validating == 0 && v.Validating != nil:
				t.Errorf("validating step %d, want none", *v.Validating)
			case c.validating > 0 && (v.Validating == nil || *v.Validating != c.validating):
				t.Errorf("validating %v, want step %d", v.Validating, c.validating)
			}
		})
	}
}

// TestGetUnderway: GetUnderway reads the in-flight record and the lease
// GetInFlight and GetLease read, and an unknown run is ErrRunNotFound.
func TestGetUnderway(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	if err := s.CreateRun(ctx, Run{Name: "r", State: StateRunning}); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	if err := s.SetInFlight(ctx, "r", InFlight{Step: 0, N: 5, JobID: "r/step-0000", Submitted: at}); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, "r", LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	u, err := s.GetUnderway(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight == nil || u.InFlight.JobID != "r/step-0000" || !u.InFlight.Submitted.Equal(at) {
		t.Errorf("in flight %+v, want r/step-0000 submitted %v", u.InFlight, at)
	}
	if u.Lease == nil || *u.Lease != l.info || !u.Live {
		t.Errorf("lease %+v (live %v), want %+v, live", u.Lease, u.Live, l.info)
	}
	if _, err := s.GetUnderway(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Errorf("GetUnderway of an unknown run: %v, want ErrRunNotFound", err)
	}
}

// TestSetUnderwayLease: the view carries the run's lease and whether its
// holder is presumed live.
func TestSetUnderwayLease(t *testing.T) {
	at := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	v := NewRunView(Run{Name: "r", State: StateRunning}, nil, nil)
	v.SetUnderway(Underway{Lease: &LeaseInfo{Holder: "h", PID: 42, Host: "box", Started: at, Heartbeat: at.Add(time.Minute)}})
	want := LeaseView{PID: 42, Host: "box", Started: at, Heartbeat: at.Add(time.Minute), Live: false}
	if v.Lease == nil || *v.Lease != want {
		t.Fatalf("lease %+v, want %+v", v.Lease, want)
	}
}

// TestSetUnderwayRecordReadBeforeACommit: an in-flight record read just
// before its step committed (SetUnderway's callers read it before the
// steps) does not show that step as under way.
func TestSetUnderwayRecordReadBeforeACommit(t *testing.T) {
	v := NewRunView(Run{Name: "r", State: StateRunning}, []Step{{Step: 0}, {Step: 1}}, nil)
	next := &InFlight{Step: 2, N: 5, JobID: "r/step-0002"}
	v.SetUnderway(Underway{InFlight: &InFlight{Step: 1, N: 5, JobID: "r/step-0001", Next: next}})
	if v.Validating != nil || v.InFlight == nil || v.InFlight.Step != 2 {
		t.Fatalf("validating %v, in flight %+v; want step 2's job alone", v.Validating, v.InFlight)
	}
}
