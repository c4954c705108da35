package refmodel

import (
	"math"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

func TestFeaturesOf(t *testing.T) {
	s := stateWaitingRight // id 1 of 5, round 2 of 5, holding left, right taken
	got := FeaturesOf(&s)
	var want Features
	want[fBias] = 1
	want[fHoldLeftOnly] = 1
	want[fWaitLeft] = 1
	want[fOddID] = 1
	want[fProgress] = 0.25
	want[fLastOK] = 1
	want[fLastPickUp] = 1
	if got != want {
		t.Fatalf("FeaturesOf(%+v)=%v, want %v", s, got, want)
	}

	s = rollout.State{Round: 5, Rounds: 5, ID: 4, N: 5, Holding: rollout.Sides{Left: true, Right: true}, Meals: 2, TableMeals: 3,
		Last: &rollout.LastEvent{Action: rollout.Invalid}}
	got = FeaturesOf(&s)
	want = Features{}
	want[fBias] = 1
	want[fHoldBoth] = 1
	want[fLastSeat] = 1
	want[fProgress] = 1
	want[fAteBefore] = 1
	want[fTableAte] = 1
	want[fLastIdle] = 1
	if got != want {
		t.Fatalf("FeaturesOf(%+v)=%v, want %v", s, got, want)
	}
}

func TestLogSoftmaxAndPick(t *testing.T) {
	var z [NumOutputs]float64
	z[1] = math.Log(3)
	m := Mask(1<<0 | 1<<1)
	lp := logSoftmax(&z, 1, m)
	if got, want := math.Exp(lp[0]), 0.25; math.Abs(got-want) > 1e-12 {
		t.Fatalf("p0=%v, want %v", got, want)
	}
	if got, want := math.Exp(lp[1]), 0.75; math.Abs(got-want) > 1e-12 {
		t.Fatalf("p1=%v, want %v", got, want)
	}
	for o := 2; o < NumOutputs; o++ {
		if !math.IsInf(lp[o], -1) {
			t.Fatalf("masked output %d has logprob %v", o, lp[o])
		}
	}
	// Temperature 2 halves the logits: p0 = 1/(1+sqrt(3)).
	lp2 := logSoftmax(&z, 2, m)
	if got, want := math.Exp(lp2[0]), 1/(1+math.Sqrt(3)); math.Abs(got-want) > 1e-12 {
		t.Fatalf("p0 at T=2 = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		temp, u float64
		want    int
	}{{1, 0, 0}, {1, 0.2499, 0}, {1, 0.2501, 1}, {1, 0.9999999, 1}, {0, 0.1, 1}} {
		if got := Pick(&lp, tc.temp, tc.u); got != tc.want {
			t.Errorf("Pick(T=%v, u=%v)=%d, want %d", tc.temp, tc.u, got, tc.want)
		}
	}
}

// TestBasePolicyIsPoorCoordinator pins the behaviours DESIGN §8 asks of the
// base weights.
func TestBasePolicyIsPoorCoordinator(t *testing.T) {
	p := BasePolicy()
	prob := func(s rollout.State, o int) float64 {
		x := FeaturesOf(&s)
		lp := p.LogProbs(&x, 1, AllOutputs)
		return math.Exp(lp[o])
	}
	both := rollout.State{Round: 3, Rounds: 5, ID: 0, N: 5, Holding: rollout.Sides{Left: true, Right: true},
		Last: &rollout.LastEvent{Action: rollout.PickUpRight, OK: true}}
	checks := []struct {
		name   string
		got    float64
		lo, hi float64
	}{
		{"first round grabs left", prob(stateFirstRound, outPickUpLeft), 0.85, 1},
		{"first round text reply", prob(stateFirstRound, TextOutput), 0.01, 0.1},
		{"waiting keeps reaching right", prob(stateWaitingRight, outPickUpRight), 0.8, 1},
		{"waiting rarely puts left down", prob(stateWaitingRight, outPutDownLeft), 0.001, 0.1},
		{"holding both eats", prob(both, outEat), 0.9, 1},
	}
	for _, c := range checks {
		if c.got < c.lo || c.got > c.hi {
			t.Errorf("%s: p=%.4f, want in [%v, %v]", c.name, c.got, c.lo, c.hi)
		}
	}
}

func TestNoStateFeatures(t *testing.T) {
	x, ok := stateFeatures("Hello, no state here.")
	if ok || x != NoStateFeatures {
		t.Fatalf("stateFeatures without a state line = %v, %v; want NoStateFeatures, false", x, ok)
	}
	lp := BasePolicy().LogProbs(&x, 1, AllOutputs)
	var sum float64
	for _, l := range lp {
		sum += math.Exp(l)
	}
	if math.Abs(sum-1) > 1e-12 {
		t.Fatalf("probabilities sum to %v", sum)
	}
}
