package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// summaryOfRun is run name's summary as ListRunsPage reads it.
func summaryOfRun(t *testing.T, s *Store, name string) RunSummary {
	t.Helper()
	list, _, err := s.ListRunsPage(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("ListRunsPage() has no run %s", name)
	return RunSummary{}
}

func TestSummary_HandComputed(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	// best-validation, EMA 0.5 over 0.2, 0.6, 0.1: smoothed 0.2, 0.4,
	// 0.25; the best is step 1 at 0.4, whose validation's deadlock rate
	// is 0.3.
	if err := s.CreateRun(ctx, Run{Name: "v", Policy: PolicyBestValidation, Metric: MetricRewardMean, EMA: 0.5}); err != nil {
		t.Fatal(err)
	}
	for step, e := range []Evaluation{{RewardMean: 0.2, DeadlockRate: 0.5}, {RewardMean: 0.6, DeadlockRate: 0.3}, {RewardMean: 0.1, DeadlockRate: 0.9}} {
		e.Step = step
		if err := s.CommitStep(ctx, "v", Step{Step: step}, &e); err != nil {
			t.Fatal(err)
		}
	}
	got := summaryOfRun(t, s, "v")
	if got.Steps != 2 || got.BestStep != 1 || got.BestValue == nil || *got.BestValue != 0.4 || got.BestDeadlockRate == nil || *got.BestDeadlockRate != 0.3 {
		t.Fatalf("summary=%+v, want steps 2, best step 1 at 0.4, deadlock rate 0.3", got)
	}

	// best-train on deadlock_rate (minimised): step k is scored by step
	// k+1's train stats, 0.5 then 0.25 then 0.75: the best is step 1
	// (scored by step 2), which was not validated: no deadlock rate.
	if err := s.CreateRun(ctx, Run{Name: "t", Policy: PolicyBestTrain, Metric: MetricDeadlockRate}); err != nil {
		t.Fatal(err)
	}
	for step, rate := range []float64{0, 0.5, 0.25, 0.75} {
		st := Step{Step: step}
		var ev *Evaluation
		if step == 0 {
			ev = &Evaluation{Step: 0, DeadlockRate: 0.6}
		} else {
			st.Train = &TrainStats{DeadlockRate: rate}
		}
		if err := s.CommitStep(ctx, "t", st, ev); err != nil {
			t.Fatal(err)
		}
	}
	got = summaryOfRun(t, s, "t")
	if got.Steps != 3 || got.BestStep != 1 || got.BestValue == nil || *got.BestValue != 0.25 || got.BestDeadlockRate != nil {
		t.Fatalf("summary=%+v, want steps 3, best step 1 at 0.25, no deadlock rate", got)
	}
	if err := s.SetRunState(ctx, "t", StateFailed, "x"); err != nil {
		t.Fatal(err)
	}
	if got := summaryOfRun(t, s, "t"); got.State != StateFailed || got.BestStep != 1 {
		t.Fatalf("summary after SetRunState=%+v, want failed, best step 1", got)
	}
}

// TestSummary_MatchesSelect: after every commit, the summary's best step
// and value are what Select chooses from all the steps so far, for every
// policy and metric, with and without smoothing, over random steps (some
// not validated, some without train stats).
func TestSummary_MatchesSelect(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, policy := range Policies {
		for _, metric := range MetricNames {
			for _, ema := range []float64{0, 0.6} {
				name := fmt.Sprintf("%s-%s-%v", policy, metric, ema)
				run := Run{Name: name, Policy: policy, Metric: metric, EMA: ema}
				if err := s.CreateRun(ctx, run); err != nil {
					t.Fatal(err)
				}
				for step := range 8 {
					st := Step{Step: step}
					if step > 0 && rng.IntN(4) > 0 {
						st.Train = &TrainStats{RewardMean: float64(rng.IntN(5)) / 4, MealsMean: float64(rng.IntN(5)), DeadlockRate: float64(rng.IntN(5)) / 4}
					}
					var ev *Evaluation
					if rng.IntN(3) > 0 {
						ev = &Evaluation{Step: step, RewardMean: float64(rng.IntN(5)) / 4, MealsMean: float64(rng.IntN(5)), DeadlockRate: float64(rng.IntN(5)) / 4}
					}
					if err := s.CommitStep(ctx, name, st, ev); err != nil {
						t.Fatal(err)
					}
					r, steps, evals, err := s.Snapshot(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					got := summaryOfRun(t, s, name)
					sel, err := Select(r.Policy, r.Metric, r.EMA, steps, evals)
					want := RunSummary{BestStep: -1}
					if err == nil {
						want.BestStep = sel.Step
						if sel.Scored {
							want.BestValue = &sel.Value
						}
						if i := slices.IndexFunc(evals, func(e Evaluation) bool { return e.Step == sel.Step }); i >= 0 {
							want.BestDeadlockRate = &evals[i].DeadlockRate
						}
					}
					if got.BestStep != want.BestStep || !samePtr(got.BestValue, want.BestValue) || !samePtr(got.BestDeadlockRate, want.BestDeadlockRate) || got.Steps != step {
						t.Fatalf("%s step %d: summary best %d value %v deadlock %v steps %d, want best %d value %v deadlock %v (Select)",
							name, step, got.BestStep, ptrString(got.BestValue), ptrString(got.BestDeadlockRate), got.Steps,
							want.BestStep, ptrString(want.BestValue), ptrString(want.BestDeadlockRate))
					}
				}
			}
		}
	}
}

func samePtr(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func ptrString(p *float64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// TestSummary_BuiltForOldStore: a run written before summaries existed
// (no summary key) is listed with the summary built from its steps, which
// is then stored; later commits advance it.
func TestSummary_BuiltForOldStore(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	if err := s.CreateRun(ctx, Run{Name: "old", Policy: PolicyBestValidation}); err != nil {
		t.Fatal(err)
	}
	for step, v := range []float64{0.3, 0.8, 0.5} {
		if err := s.CommitStep(ctx, "old", Step{Step: step}, &Evaluation{Step: step, RewardMean: v}); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() []byte {
		var v []byte
		if err := s.view(ctx, func(tx *bolt.Tx) error {
			b, err := runBucket(tx, "old")
			v = slices.Clone(b.Get(summaryKey))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, "old")
		if err != nil {
			return err
		}
		return b.Delete(summaryKey)
	}); err != nil {
		t.Fatal(err)
	}
	if v := stored(); v != nil {
		t.Fatalf("summary still stored: %s", v)
	}
	got := summaryOfRun(t, s, "old")
	if got.Steps != 2 || got.BestStep != 1 || *got.BestValue != 0.8 {
		t.Fatalf("built summary=%+v, want steps 2, best step 1 at 0.8", got)
	}
	var rec summaryRecord
	if err := json.Unmarshal(stored(), &rec); err != nil || rec.BestStep != 1 || rec.Steps != 2 {
		t.Fatalf("stored summary=%+v (%v), want it stored once built", rec, err)
	}
	if err := s.CommitStep(ctx, "old", Step{Step: 3}, &Evaluation{Step: 3, RewardMean: 0.9}); err != nil {
		t.Fatal(err)
	}
	if got := summaryOfRun(t, s, "old"); got.Steps != 3 || got.BestStep != 3 || *got.BestValue != 0.9 {
		t.Fatalf("summary after a commit=%+v, want steps 3, best step 3 at 0.9", got)
	}
}

func TestListRunsPage(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	for _, name := range []string{"c", "a", "exp/b", "b"} {
		mustCreateRun(t, s, name)
	}
	var names []string
	var pages int
	for after := ""; ; {
		list, next, err := s.ListRunsPage(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range list {
			names = append(names, r.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if got, want := names, []string{"a", "b", "c", "exp/b"}; !slices.Equal(got, want) || pages != 2 {
		t.Fatalf("pages of 2: %v in %d pages, want %v in 2", got, pages, want)
	}
	// After a name that is not a run: from the next one.
	list, next, err := s.ListRunsPage(ctx, "bb", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "c" || next != "" {
		t.Fatalf("ListRunsPage(bb)=%v next %q, want c, exp/b and no next page", list, next)
	}
}

// BenchmarkListRuns lists 2,000 runs of 10 steps each, every step
// validated with 64 episode records.
func BenchmarkListRuns(b *testing.B) {
	ctx := context.Background()
	s := mustOpen(b)
	records := make([]EpisodeRecord, 64)
	if err := s.update(ctx, func(tx *bolt.Tx) error {
		for i := range 2000 {
			run := Run{Name: fmt.Sprintf("run-%04d", i), State: StateSucceeded, Policy: PolicyBestValidation, Created: time.Unix(int64(i), 0)}
			rb, err := tx.Bucket(runsBucket).CreateBucket([]byte(run.Name))
			if err != nil {
				return err
			}
			if err := putRun(rb, run); err != nil {
				return err
			}
			for step := range 10 {
				st := Step{Step: step, Train: &TrainStats{RewardMean: float64(step)}}
				ev := Evaluation{Step: step, RewardMean: float64(step % 4), Records: records}
				sv, _ := json.Marshal(st)
				evv, _ := json.Marshal(ev)
				if err := commitStep(rb, run.Name, st, &ev, sv, evv); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		list, err := s.ListRuns(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(list) != 2000 || list[0].BestStep != 3 {
			b.Fatalf("ListRuns()=%d runs, first best step %d, want 2000 runs, best step 3", len(list), list[0].BestStep)
		}
	}
}
