package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestStore_CreateGetRun(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	want := Run{
		Name:    "dp5-shaped",
		Config:  json.RawMessage(`{"run":{"steps":16}}`),
		State:   StateRunning,
		Steps:   16,
		Policy:  PolicyBestValidation,
		Metric:  MetricRewardMean,
		EMA:     0.5,
		Created: created,
		Updated: created,
	}
	if err := s.CreateRun(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, want.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ID) != 16 || strings.Trim(got.ID, "0123456789abcdef") != "" {
		t.Fatalf("CreateRun drew id %q, want 16 hex digits", got.ID)
	}
	want.ID = got.ID
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetRun()=%+v, want %+v", got, want)
	}

	if err := s.CreateRun(ctx, want); !errors.Is(err, ErrRunExists) {
		t.Fatalf("second CreateRun()=%v, want ErrRunExists", err)
	}
	if _, err := s.GetRun(ctx, "other"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("GetRun(other)=%v, want ErrRunNotFound", err)
	}
}

func TestStore_CreateRunDefaults(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	before := time.Now()
	if err := s.CreateRun(ctx, Run{Name: "dp5"}); err != nil {
		t.Fatal(err)
	}
	run, err := s.GetRun(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != StateRunning || run.Created.Before(before.Add(-time.Second)) || !run.Updated.Equal(run.Created) {
		t.Fatalf("GetRun()=%+v, want state running and Created=Updated=now", run)
	}
}

func TestStore_CreateRunInvalid(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	for _, run := range []Run{
		{Name: ""},
		{Name: "a/../b"},
		{Name: "dp5", State: "paused"},
	} {
		if err := s.CreateRun(ctx, run); err == nil {
			t.Errorf("CreateRun(%+v)=nil, want an error", run)
		}
	}
}

func TestStore_SetRunState(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	created := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := s.CreateRun(ctx, Run{Name: "dp5", Created: created}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRunState(ctx, "dp5", StateFailed, "trainer job failed"); err != nil {
		t.Fatal(err)
	}
	run, err := s.GetRun(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	if run.State != StateFailed || run.Error != "trainer job failed" || !run.Updated.After(created) || !run.Created.Equal(created) {
		t.Fatalf("GetRun()=%+v, want failed with its message and a later Updated", run)
	}
	if err := s.SetRunState(ctx, "dp5", StateRunning, ""); err != nil {
		t.Fatal(err)
	}
	if run, _ := s.GetRun(ctx, "dp5"); run.State != StateRunning || run.Error != "" {
		t.Fatalf("GetRun()=%+v, want running with no error", run)
	}
	if err := s.SetRunState(ctx, "dp5", "done", ""); err == nil {
		t.Fatal("SetRunState(done)=nil, want an error naming the accepted states")
	}
	if err := s.SetRunState(ctx, "nope", StateFailed, ""); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("SetRunState(nope)=%v, want ErrRunNotFound", err)
	}
}

func TestStore_ListRuns(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Created out of name order: the list is oldest first.
	for i, r := range []Run{
		{Name: "b", Created: t0, Policy: PolicyBestValidation},
		{Name: "a", Created: t0.Add(time.Hour), Policy: PolicyLast},
		{Name: "c", Created: t0.Add(2 * time.Hour), Policy: PolicyBestValidation},
	} {
		if err := s.CreateRun(ctx, r); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	for _, name := range []string{"a", "b"} {
		for step, v := range []float64{0.1, 0.9, 0.4} {
			if err := s.CommitStep(ctx, name, Step{Step: step}, &Evaluation{Step: step, RewardMean: v}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.SetRunState(ctx, "b", StateSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i].Updated = time.Time{} // the time of the last commit or state change
	}
	f := func(v float64) *float64 { return &v }
	want := []RunSummary{
		{Name: "b", State: StateSucceeded, Steps: 2, BestStep: 1, BestValue: f(0.9), BestDeadlockRate: f(0), Metric: MetricRewardMean, Created: t0},
		{Name: "a", State: StateRunning, Steps: 2, BestStep: 2, BestValue: f(0.4), BestDeadlockRate: f(0), Metric: MetricRewardMean, Created: t0.Add(time.Hour)},
		{Name: "c", State: StateRunning, Steps: 0, BestStep: -1, Metric: MetricRewardMean, Created: t0.Add(2 * time.Hour)},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ListRuns()=%+v, want %+v", got, want)
	}
	b, err := json.Marshal(got[0])
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"name":"b","state":"succeeded","steps":2,"best_step":1,"best_value":0.9,"best_deadlock_rate":0,"metric":"reward_mean","created":"2026-03-01T12:00:00Z","updated":"0001-01-01T00:00:00Z"}`; got != want {
		t.Fatalf("JSON=%s, want %s", got, want)
	}
}

func TestStore_UniqueRunName(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	for _, want := range []string{"dp5-1", "dp5-2", "dp5-3"} {
		got, err := s.UniqueRunName(ctx, "dp5")
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("UniqueRunName()=%q, want %q", got, want)
		}
		mustCreateRun(t, s, got)
	}
	mustCreateRun(t, s, "x-2")
	if got, err := s.UniqueRunName(ctx, "x"); err != nil || got != "x-1" {
		t.Fatalf("UniqueRunName(x)=%q, %v, want x-1", got, err)
	}
	if _, err := s.UniqueRunName(ctx, ""); err == nil {
		t.Fatal("UniqueRunName(\"\")=nil error, want one")
	}
}

// TestRunID: ids are drawn at creation, differ between runs, and survive
// state changes (a resume keeps its id).
func TestRunID(t *testing.T) {
	ctx := context.Background()
	a, b := mustOpen(t), mustOpen(t)
	for _, s := range []*Store{a, b} {
		if err := s.CreateRun(ctx, Run{Name: "same"}); err != nil {
			t.Fatal(err)
		}
	}
	ra, _ := a.GetRun(ctx, "same")
	rb, _ := b.GetRun(ctx, "same")
	if ra.ID == "" || ra.ID == rb.ID {
		t.Fatalf("ids %q and %q: want two different ids", ra.ID, rb.ID)
	}
	if err := a.SetRunState(ctx, "same", StateCancelled, "x"); err != nil {
		t.Fatal(err)
	}
	if err := a.SetRunState(ctx, "same", StateRunning, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetRun(ctx, "same"); got.ID != ra.ID {
		t.Fatalf("id %q after state changes, want %q", got.ID, ra.ID)
	}
	if err := a.CreateRun(ctx, Run{Name: "given", ID: "fixed"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := a.GetRun(ctx, "given"); got.ID != "fixed" {
		t.Fatalf("a given id became %q", got.ID)
	}
}
