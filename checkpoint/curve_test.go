package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestDecodeAllKeepsOrderAndNamesTheBadRecord: records decoded on several
// cores come back in key order, and a damaged one is named.
func TestDecodeAllKeepsOrderAndNamesTheBadRecord(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "d.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 1000
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("steps"))
		if err != nil {
			return err
		}
		for i := range n {
			v, _ := json.Marshal(testStep(i))
			if err := b.Put(itob(i), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		steps, err := decodeAll[Step](tx.Bucket([]byte("steps")), "r", "step")
		if err != nil || len(steps) != n {
			t.Fatalf("decodeAll: %d steps, %v; want %d", len(steps), err, n)
		}
		for i, s := range steps {
			if !reflect.DeepEqual(s, testStep(i)) {
				t.Fatalf("step at %d: %+v, want %+v", i, s, testStep(i))
			}
		}
		return nil
	})
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("steps")).Put(itob(700), []byte(`{"step":`)) })
	db.View(func(tx *bolt.Tx) error {
		_, err := decodeAll[Step](tx.Bucket([]byte("steps")), "r", "step")
		if err == nil || !strings.Contains(err.Error(), "step 700 of run r") {
			t.Fatalf("decodeAll with step 700 damaged: %v, want an error naming step 700", err)
		}
		return nil
	})
}

// TestCurveIsSnapshotWithoutRecords: Curve returns what Snapshot does,
// but each evaluation's records and transcripts.
func TestCurveIsSnapshotWithoutRecords(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	for i := range 3 {
		ev := &Evaluation{Step: i, Episodes: 2, RewardMean: 0.5, Rewards: []float64{0.25, 0.75}, PerN: []EvalN{{N: 5, Episodes: 2}},
			Records:     []EpisodeRecord{{N: 5, Seed: 1, Reward: 0.25}, {N: 5, Seed: 2, Reward: 0.75}},
			Transcripts: []EpisodeReplay{{ID: fmt.Sprint(i), N: 5, Seed: 1}}}
		if err := s.CommitStep(ctx, "dp5", testStep(i), ev); err != nil {
			t.Fatal(err)
		}
	}
	run, steps, evals, err := s.Snapshot(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	crun, csteps, cevals, err := s.Curve(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	for i := range evals {
		if len(evals[i].Records) != 2 || len(evals[i].Transcripts) != 1 {
			t.Fatalf("Snapshot evaluation %d: %d records, %d transcripts; want 2 and 1", i, len(evals[i].Records), len(evals[i].Transcripts))
		}
		evals[i].Records, evals[i].Transcripts = nil, nil
	}
	if !reflect.DeepEqual(run, crun) || !reflect.DeepEqual(steps, csteps) || !reflect.DeepEqual(evals, cevals) {
		t.Fatalf("Curve:\n%+v\n%+v\n%+v\nSnapshot without records:\n%+v\n%+v\n%+v", crun, csteps, cevals, run, steps, evals)
	}
	if _, _, _, err := s.Curve(ctx, "nope"); err == nil {
		t.Fatal("Curve of a missing run: nil error")
	}
}

// TestHeadIsWhatCurveReads checks that an evaluation's Head, which a run
// keeps in memory after committing it, is what Curve reads back.
func TestHeadIsWhatCurveReads(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	ev := Evaluation{Step: 0, Episodes: 2, Errored: 1, RewardMean: 0.5, RewardStd: 0.25, RewardCI95: [2]float64{0.1, 0.9},
		DeadlockRate: 0.5, MealsMean: 2, InvalidRate: 0.125, Rewards: []float64{0.25, 0.75},
		PerN:        []EvalN{{N: 5, Episodes: 2, RewardMean: 0.5, DeadlockRate: 0.5, MealsMean: 2, InvalidRate: 0.125}},
		Records:     []EpisodeRecord{{N: 5, Seed: 1, Reward: 0.25}, {N: 5, Seed: 2, Reward: 0.75}},
		Transcripts: []EpisodeReplay{{ID: "a", N: 5, Seed: 1}}}
	if err := s.CommitStep(ctx, "dp5", testStep(0), &ev); err != nil {
		t.Fatal(err)
	}
	_, _, evals, err := s.Curve(ctx, "dp5")
	if err != nil {
		t.Fatal(err)
	}
	head := ev.Head()
	if len(evals) != 1 || !reflect.DeepEqual(head, evals[0]) {
		t.Fatalf("Head:\n%+v\nCurve:\n%+v", head, evals)
	}
	if head.Records != nil || head.Transcripts != nil || len(ev.Records) != 2 || len(ev.Transcripts) != 1 {
		t.Fatalf("Head keeps %d records and %d transcripts, or changed the evaluation (%d, %d)",
			len(head.Records), len(head.Transcripts), len(ev.Records), len(ev.Transcripts))
	}
}

// TestStepHead checks that a step's Head keeps what selection reads and
// drops the rest, without touching the step it was made from.
func TestStepHead(t *testing.T) {
	ad := &Adapter{Name: "a1", Path: "/a1"}
	s := Step{Step: 3, N: 5, Adapter: ad, Seconds: map[string]float64{"train": 2},
		Job:   &Job{ID: "j3", State: "succeeded", Metrics: map[string]float64{"loss": 0.5}},
		Train: &TrainStats{RewardMean: 0.25, DeadlockRate: 0.5, MealsMean: 1.5, Episodes: 4, Groups: []GroupStats{{ID: "g", Rewards: []float64{0, 1}}}}}
	h := s.Head()
	want := Step{Step: 3, N: 5, Adapter: ad, Train: &TrainStats{RewardMean: 0.25, DeadlockRate: 0.5, MealsMean: 1.5, Episodes: 4}}
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("Head %+v (train %+v), want %+v (train %+v)", h, *h.Train, want, *want.Train)
	}
	if len(s.Train.Groups) != 1 || s.Job == nil || len(s.Seconds) != 1 {
		t.Fatalf("Head changed its step: %+v", s)
	}
	if z := (Step{Step: 0}).Head(); z.Train != nil || z.Adapter != nil {
		t.Fatalf("Head of step 0: %+v", z)
	}
}
