package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"
)

func testStep(step int) Step {
	st := Step{
		Step:      step,
		N:         5,
		Committed: time.Date(2026, 3, 1, 12, step, 0, 0, time.UTC),
	}
	if step > 0 {
		st.Train = &TrainStats{
			RewardMean: 0.25, RewardStd: 0.5, Episodes: 6, DeadlockRate: 0.5, MealsMean: 2.5,
			ZeroVarianceGroups: 1, FracRewardZeroStd: 0.5, Trajectories: 30,
			Groups: []GroupStats{{ID: "g0", Seed: 7, N: 5, Rewards: []float64{0, 0.5, 1}, Mean: 0.5, Std: 0.5}},
		}
		st.Adapter = &Adapter{Name: "dp5-step", Path: "/adapters/dp5/step"}
		st.Job = &Job{ID: "job", State: "succeeded", Metrics: map[string]float64{"loss": 0.125}}
		st.Seconds = map[string]float64{"rollout": 1.5, "train": 2}
	}
	return st
}

func TestStore_CommitStepExactlyOnce(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")

	if _, ok, err := s.LastStep(ctx, "dp5"); err != nil || ok {
		t.Fatalf("LastStep()=_, %v, %v, want none", ok, err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(1), nil); !errors.Is(err, ErrStepOutOfOrder) {
		t.Fatalf("CommitStep(1) first=%v, want ErrStepOutOfOrder", err)
	}
	eval0 := &Evaluation{Step: 0, Episodes: 24, RewardMean: 0.25, RewardCI95: [2]float64{0.125, 0.375}, Rewards: []float64{0, 0.5}, PerN: []EvalN{{N: 5, Episodes: 24, RewardMean: 0.25}}}
	if err := s.CommitStep(ctx, "dp5", testStep(0), eval0); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(0), nil); !errors.Is(err, ErrStepExists) {
		t.Fatalf("CommitStep(0) again=%v, want ErrStepExists", err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(2), nil); !errors.Is(err, ErrStepOutOfOrder) {
		t.Fatalf("CommitStep(2) after 0=%v, want ErrStepOutOfOrder", err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(1), &Evaluation{Step: 2}); err == nil {
		t.Fatal("CommitStep(1) with the evaluation of step 2=nil, want an error")
	}
	if err := s.CommitStep(ctx, "dp5", testStep(1), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(1), nil); !errors.Is(err, ErrStepExists) {
		t.Fatalf("CommitStep(1) again=%v, want ErrStepExists", err)
	}
	if err := s.CommitStep(ctx, "nope", testStep(0), nil); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("CommitStep(nope)=%v, want ErrRunNotFound", err)
	}

	if last, ok, err := s.LastStep(ctx, "dp5"); err != nil || !ok || last != 1 {
		t.Fatalf("LastStep()=%d, %v, %v, want 1", last, ok, err)
	}
	_, steps, evals, err := s.Snapshot(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	if want := []Step{testStep(0), testStep(1)}; !reflect.DeepEqual(steps, want) {
		t.Fatalf("Snapshot() steps=%+v, want %+v", steps, want)
	}
	if want := []Evaluation{*eval0}; !reflect.DeepEqual(evals, want) {
		t.Fatalf("Snapshot() evaluations=%+v, want %+v", evals, want)
	}
	run, err := s.GetRun(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	if want := testStep(1).Committed; !run.Updated.Equal(want) {
		t.Fatalf("run Updated=%v, want the last commit %v", run.Updated, want)
	}
}

// TestStore_StepOrder commits past 255 and 256 so that byte order of the
// keys must be numeric order.
func TestStore_StepOrder(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "long")
	for i := range 260 {
		if err := s.CommitStep(ctx, "long", Step{Step: i}, &Evaluation{Step: i}); err != nil {
			t.Fatal(err)
		}
	}
	run, steps, evals, err := s.Snapshot(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if run.Name != "long" || len(steps) != 260 || len(evals) != 260 {
		t.Fatalf("Snapshot()=%s, %d steps, %d evaluations, want long, 260, 260", run.Name, len(steps), len(evals))
	}
	for i := range steps {
		if steps[i].Step != i || evals[i].Step != i {
			t.Fatalf("index %d: step %d evaluation %d, want %d", i, steps[i].Step, evals[i].Step, i)
		}
	}
}

func TestStore_InFlight(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	if err := s.CommitStep(ctx, "dp5", testStep(0), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetInFlight(ctx, "dp5"); err != nil || got != nil {
		t.Fatalf("GetInFlight()=%+v, %v, want nil, nil", got, err)
	}

	want := InFlight{
		Step:          1,
		N:             5,
		JobID:         "dp5-step-1",
		OutputAdapter: "dp5-step-1",
		Request:       json.RawMessage(`{"id":"dp5-step-1","trajectories":[]}`),
		Train:         testStep(1).Train,
		Submitted:     time.Date(2026, 3, 1, 12, 30, 0, 0, time.UTC),
	}
	if err := s.SetInFlight(ctx, "dp5", want); err != nil {
		t.Fatal(err)
	}
	// A restarted orchestrator opens the file afresh and finds the job.
	restarted := New(s.Path(), Options{})
	got, err := restarted.GetInFlight(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || !reflect.DeepEqual(*got, want) {
		t.Fatalf("GetInFlight()=%+v, want %+v", got, want)
	}
	if err := restarted.SetInFlight(ctx, "dp5", InFlight{Step: 0}); !errors.Is(err, ErrStepExists) {
		t.Fatalf("SetInFlight(step 0)=%v, want ErrStepExists", err)
	}

	if err := restarted.CommitStep(ctx, "dp5", testStep(1), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := restarted.GetInFlight(ctx, "dp5"); err != nil || got != nil {
		t.Fatalf("GetInFlight() after commit=%+v, %v, want nil", got, err)
	}

	// The record of a later step survives a commit.
	if err := s.SetInFlight(ctx, "dp5", InFlight{Step: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(2), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetInFlight(ctx, "dp5"); err != nil || got == nil || got.Step != 3 {
		t.Fatalf("GetInFlight()=%+v, %v, want step 3", got, err)
	}
	if _, err := s.GetInFlight(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("GetInFlight(nope)=%v, want ErrRunNotFound", err)
	}
}

func TestStore_StepJSON(t *testing.T) {
	b, err := json.Marshal(Step{Step: 0, N: 5, Committed: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"step":0,"n":5,"train":null,"adapter":null,"job":null,"committed":"2026-03-01T12:00:00Z"}`; got != want {
		t.Fatalf("JSON=%s, want %s", got, want)
	}
}

func BenchmarkCommitStep(b *testing.B) {
	ctx := context.Background()
	s := mustOpen(b)
	mustCreateRun(b, s, "bench")
	st := testStep(1)
	eval := &Evaluation{Rewards: make([]float64, 24), PerN: []EvalN{{N: 5}}}
	i := 0
	for b.Loop() {
		st.Step, eval.Step = i, i
		if err := s.CommitStep(ctx, "bench", st, eval); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	s := mustOpen(b)
	mustCreateRun(b, s, "bench")
	for i := range 17 {
		st := testStep(i)
		if err := s.CommitStep(ctx, "bench", st, &Evaluation{Step: i, Rewards: make([]float64, 24)}); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, _, _, err := s.Snapshot(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStore_InFlightNested: the job of step s+1, submitted while step s
// (trained) is still being validated, is kept under s's record and
// becomes the record when s commits; a restart finds both.
func TestStore_InFlightNested(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	if err := s.CommitStep(ctx, "dp5", testStep(0), nil); err != nil {
		t.Fatal(err)
	}
	set := func(step int, job string) {
		t.Helper()
		if err := s.SetInFlight(ctx, "dp5", InFlight{Step: step, JobID: job, Request: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	get := func() *InFlight {
		t.Helper()
		inf, err := New(s.Path(), Options{}).GetInFlight(ctx, "dp5")
		if err != nil {
			t.Fatal(err)
		}
		return inf
	}
	set(1, "j1")
	set(2, "j2")
	inf := get()
	if inf == nil || inf.Step != 1 || inf.JobID != "j1" || inf.Next == nil || inf.Next.Step != 2 || inf.Next.JobID != "j2" || inf.Next.Next != nil {
		t.Fatalf("after jobs 1 and 2: %+v, want step 1 with step 2 next", inf)
	}
	if inf.For(1) != inf || inf.For(2) != inf.Next || inf.For(3) != nil || inf.For(0) != nil || (*InFlight)(nil).For(1) != nil {
		t.Fatalf("For: %+v %+v %+v", inf.For(1), inf.For(2), inf.For(3))
	}
	set(2, "j2b") // the same step again replaces the nested record
	if inf := get(); inf.Step != 1 || inf.Next == nil || inf.Next.JobID != "j2b" {
		t.Fatalf("after job 2 again: %+v", inf)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(1), nil); err != nil {
		t.Fatal(err)
	}
	if inf := get(); inf == nil || inf.Step != 2 || inf.JobID != "j2b" || inf.Next != nil {
		t.Fatalf("after step 1 committed: %+v, want step 2's job alone", inf)
	}
	set(3, "j3")
	if err := s.CommitStep(ctx, "dp5", testStep(2), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(3), nil); err != nil {
		t.Fatal(err)
	}
	if inf := get(); inf != nil {
		t.Fatalf("after step 3 committed: %+v, want none", inf)
	}
	// A record of an earlier step is replaced by a later one once that
	// step is committed (it would have been deleted by the commit).
	set(4, "j4")
	set(6, "j6")
	if inf := get(); inf.Step != 4 || inf.Next == nil || inf.Next.Step != 6 {
		t.Fatalf("%+v", inf)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(4), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitStep(ctx, "dp5", testStep(5), nil); err != nil {
		t.Fatal(err)
	}
	if inf := get(); inf == nil || inf.Step != 6 {
		t.Fatalf("after 5: %+v, want 6", inf)
	}
}
