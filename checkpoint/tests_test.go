package checkpoint

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

func TestStore_TestEvaluations(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	mustCreateRun(t, s, "dp5")
	if got, err := s.TestEvaluations(ctx, "dp5", SplitTest); err != nil || len(got) != 0 {
		t.Fatalf("TestEvaluations() before any = %v, %v; want none", got, err)
	}
	te := func(step int, reward float64) TestEvaluation {
		return TestEvaluation{Split: SplitTest, Seed: 2000000, Evaluation: Evaluation{
			Step: step, Episodes: 2, RewardMean: reward, PerN: []EvalN{{N: 5, Episodes: 2, RewardMean: reward}},
			Records: []EpisodeRecord{{N: 5, Seed: 2000000, Reward: reward, Meals: 3, Terms: RewardTerms{NoDeadlock: 1, Throughput: 0.5}},
				{N: 5, Seed: 2000001, Reward: reward, Deadlock: true, Invalid: 2, Calls: 25}},
		}}
	}
	// Out of order, and step 4 measured twice: the later one stays.
	for _, x := range []TestEvaluation{te(4, 0.5), te(0, 0.125), te(4, 0.75)} {
		if err := s.PutTestEvaluation(ctx, "dp5", x); err != nil {
			t.Fatal(err)
		}
	}
	other := te(4, 9)
	other.Split = "other"
	if err := s.PutTestEvaluation(ctx, "dp5", other); err != nil {
		t.Fatal(err)
	}
	got, err := s.TestEvaluations(ctx, "dp5", SplitTest)
	if err != nil {
		t.Fatal(err)
	}
	if want := []TestEvaluation{te(0, 0.125), te(4, 0.75)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("TestEvaluations()=%+v\nwant %+v", got, want)
	}
	if err := s.PutTestEvaluation(ctx, "nope", te(0, 0)); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("PutTestEvaluation on an unknown run = %v, want ErrRunNotFound", err)
	}
	if _, err := s.TestEvaluations(ctx, "nope", SplitTest); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("TestEvaluations of an unknown run = %v, want ErrRunNotFound", err)
	}
	if err := s.PutTestEvaluation(ctx, "dp5", TestEvaluation{Evaluation: Evaluation{Step: 1}}); err == nil {
		t.Fatal("PutTestEvaluation without a split: no error")
	}
}
