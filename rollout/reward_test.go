package rollout

import (
	"math"
	"testing"
)

func TestRewardTable(t *testing.T) {
	cases := []struct {
		name         string
		n            int
		policy       func(State) string
		paper, shape float64
		terms        Terms // under shaped
	}{
		// DESIGN §3 worked example: r_nd 1, r_thru 1, r_fair 2.16/5.76,
		// r_idle 15/25: 1 + 0.5 - 0.3*0.375 - 0.1*0.6 = 1.3275.
		{"worked example", 5, workedExample, 1.3275, 1.3275, Terms{1, 1, 0.375, 0.6}},
		// Silent: paper 1 (no deadlock, no actions); shaped: r_nd needs a
		// meal and 25 invalid outputs are 25 idle actions: -0.1.
		{"silent", 5, func(State) string { return "I would rather not." }, 1.0, -0.1, Terms{0, 0, 0, 1}},
		// All think: paper 1 - 0.1 = 0.9; shaped 0 - 0.1 = -0.1.
		{"all think", 5, func(State) string { return Think }, 0.9, -0.1, Terms{0, 0, 0, 1}},
		// Everybody grabs left: deadlock in round 1, no meals, no thinks.
		{"all left", 5, func(State) string { return PickUpLeft }, 0, 0, Terms{0, 0, 0, 0}},
		// n=10: 0,2,4,6,8 eat three times each: M = 15 = M_max; meals
		// variance 2.25 over max 225*9/100 = 20.25: fair 1/9; idle = 25
		// thinks / 50 = 0.5: 1 + 0.5 - 0.3/9 - 0.05 = 1.41666...
		{"n10 even eaters", 10, func(s State) string {
			if s.ID%2 == 1 {
				return Think
			}
			return workedExample(State{ID: 0, Round: s.Round})
		}, 1.5 - 0.3/9 - 0.05, 1.5 - 0.3/9 - 0.05, Terms{1, 1, 1.0 / 9, 0.5}},
		// n=5, only philosopher 0 eats 3 meals: M=3, thru 0.5, variance of
		// (3,0,0,0,0) = 1.44, max 9*4/25 = 1.44: fair 1; idle 20/25 = 0.8:
		// 1 + 0.25 - 0.3 - 0.08 = 0.87.
		{"one eater", 5, func(s State) string {
			if s.ID != 0 {
				return Think
			}
			return workedExample(s)
		}, 0.87, 0.87, Terms{1, 0.5, 1, 0.8}},
	}
	for _, c := range cases {
		m := play(t, cfg(c.n, Simultaneous), c.policy).Metrics()
		p, _ := Score(RewardConfig{Function: Paper, Weights: DefaultWeights()}, m)
		s, terms := Score(DefaultRewardConfig(), m)
		if math.Abs(p-c.paper) > 1e-9 || math.Abs(s-c.shape) > 1e-9 {
			t.Errorf("%s: paper %.6f shaped %.6f, want %.6f %.6f", c.name, p, s, c.paper, c.shape)
		}
		if !near(terms, c.terms) {
			t.Errorf("%s: terms %+v, want %+v", c.name, terms, c.terms)
		}
	}
}

func near(a, b Terms) bool {
	return math.Abs(a.NoDeadlock-b.NoDeadlock) < 1e-9 && math.Abs(a.Throughput-b.Throughput) < 1e-9 &&
		math.Abs(a.Unfairness-b.Unfairness) < 1e-9 && math.Abs(a.Idle-b.Idle) < 1e-9
}

func TestRewardWeights(t *testing.T) {
	m := play(t, cfg(5, Simultaneous), workedExample).Metrics()
	r, _ := Score(RewardConfig{Function: Shaped, Weights: Weights{Alpha: 2, Beta: 1, Gamma: 0, Delta: 1}}, m)
	// 2*1 + 1*1 - 0 - 1*0.6 = 2.4
	if math.Abs(r-2.4) > 1e-12 {
		t.Fatalf("reward = %v, want 2.4", r)
	}
}

func TestParseRewardFunc(t *testing.T) {
	if f, err := ParseRewardFunc("paper"); err != nil || f != Paper {
		t.Fatalf("ParseRewardFunc(paper) = %v, %v", f, err)
	}
	if _, err := ParseRewardFunc("dense"); err == nil || err.Error() != `reward function "dense": accepted: shaped, paper` {
		t.Fatalf("ParseRewardFunc(dense) error = %v", err)
	}
}
