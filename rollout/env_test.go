package rollout

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// play drives a table to its end with a scripted policy.
func play(t *testing.T, cfg EnvConfig, policy func(s State) string) *Table {
	t.Helper()
	tb, err := NewTable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for !tb.Done() {
		if cfg.Mode == Sequential {
			for i := range cfg.N {
				tb.Act(i, policy(tb.Observe(i)))
			}
			tb.EndRound()
			continue
		}
		actions := make([]string, cfg.N)
		for i := range actions {
			actions[i] = policy(tb.Observe(i))
		}
		tb.Resolve(actions)
	}
	return tb
}

func cfg(n int, mode Mode) EnvConfig {
	c := DefaultEnvConfig()
	c.N, c.Mode = n, mode
	return c
}

// workedExample: philosophers 0 and 2 pick up left, pick up right, then eat
// three times; everyone else thinks (DESIGN §3).
func workedExample(s State) string {
	if s.ID != 0 && s.ID != 2 {
		return Think
	}
	switch s.Round {
	case 1:
		return PickUpLeft
	case 2:
		return PickUpRight
	}
	return Eat
}

func TestWorkedExampleBothModes(t *testing.T) {
	for _, mode := range []Mode{Simultaneous, Sequential} {
		m := play(t, cfg(5, mode), workedExample).Metrics()
		want := []int{3, 0, 3, 0, 0}
		for i := range want {
			if m.Meals[i] != want[i] {
				t.Fatalf("%s: meals = %v, want %v", mode, m.Meals, want)
			}
		}
		if m.TotalMeals != 6 || m.MaxMeals != 6 || m.Deadlocked || m.RoundsPlayed != 5 || m.Starved != 3 {
			t.Fatalf("%s: metrics = %+v", mode, m)
		}
		if got, want := m.Actions[Think], 15; got != want {
			t.Fatalf("%s: thinks = %d, want %d", mode, got, want)
		}
		if m.Failed != 0 || m.Invalid != 0 {
			t.Fatalf("%s: failed %d invalid %d, want 0 0", mode, m.Failed, m.Invalid)
		}
		// Jain = 36 / (5 * 18) = 0.4
		if math.Abs(m.Jain-0.4) > 1e-12 {
			t.Fatalf("%s: jain = %v, want 0.4", mode, m.Jain)
		}
	}
}

func TestEverybodyGrabsLeftDeadlocksInRoundOne(t *testing.T) {
	for _, n := range []int{5, 10, 15} {
		for _, mode := range []Mode{Simultaneous, Sequential} {
			m := play(t, cfg(n, mode), func(State) string { return PickUpLeft }).Metrics()
			if !m.Deadlocked || m.DeadlockRound != 1 || m.RoundsPlayed != 1 {
				t.Fatalf("n=%d %s: deadlocked=%v round=%d played=%d, want true 1 1", n, mode, m.Deadlocked, m.DeadlockRound, m.RoundsPlayed)
			}
			if m.Actions[PickUpLeft] != n || m.Failed != 0 {
				t.Fatalf("n=%d %s: actions %v failed %d", n, mode, m.Actions, m.Failed)
			}
		}
	}
}

func TestEverybodyGrabsRightDeadlocksToo(t *testing.T) {
	m := play(t, cfg(5, Simultaneous), func(State) string { return PickUpRight }).Metrics()
	if !m.Deadlocked || m.DeadlockRound != 1 {
		t.Fatalf("deadlocked=%v round=%d, want true 1", m.Deadlocked, m.DeadlockRound)
	}
}

func TestDeadlockPatience(t *testing.T) {
	c := cfg(5, Simultaneous)
	c.DeadlockPatience = 2
	// Round 1 everybody grabs left (stuck), round 2 everybody thinks (still
	// stuck): ends at the end of round 2.
	m := play(t, c, func(s State) string {
		if s.Round == 1 {
			return PickUpLeft
		}
		return Think
	}).Metrics()
	if !m.Deadlocked || m.DeadlockRound != 2 || m.RoundsPlayed != 2 {
		t.Fatalf("deadlocked=%v round=%d played=%d, want true 2 2", m.Deadlocked, m.DeadlockRound, m.RoundsPlayed)
	}
	// A put-down in round 2 breaks the wait; round 3 grabs again: the stuck
	// count restarts, so the episode ends at round 4.
	m = play(t, c, func(s State) string {
		switch {
		case s.Round == 2 && s.ID == 0:
			return PutDownLeft
		case s.Round == 3 && s.ID == 0:
			return PickUpLeft
		case s.Round == 1:
			return PickUpLeft
		}
		return Think
	}).Metrics()
	if !m.Deadlocked || m.DeadlockRound != 4 {
		t.Fatalf("deadlocked=%v round=%d, want true 4", m.Deadlocked, m.DeadlockRound)
	}
}

func TestContestedForkGoesToOneNeighbourBySeed(t *testing.T) {
	// Philosopher 0 reaches right (fork 1), philosopher 1 reaches left
	// (fork 1): exactly one wins, the same one for the same seed, and both
	// outcomes happen across seeds.
	wins := map[int]int{}
	for seed := int64(0); seed < 64; seed++ {
		c := cfg(5, Simultaneous)
		c.Seed = seed
		tb, _ := NewTable(c)
		actions := []string{PickUpRight, PickUpLeft, Think, Think, Think}
		ok := tb.Resolve(actions)
		if ok[0] == ok[1] {
			t.Fatalf("seed %d: ok = %v, want exactly one winner", seed, ok[:2])
		}
		tb2, _ := NewTable(c)
		if ok2 := tb2.Resolve(actions); ok2[0] != ok[0] {
			t.Fatalf("seed %d: winner differs between identical tables", seed)
		}
		winner := 1
		if ok[0] {
			winner = 0
		}
		if s := tb.Observe(winner); !s.Holding.Left && !s.Holding.Right {
			t.Fatalf("seed %d: winner %d holds nothing", seed, winner)
		}
		if tb.Metrics().Failed != 1 {
			t.Fatalf("seed %d: failed = %d, want 1", seed, tb.Metrics().Failed)
		}
		wins[winner]++
	}
	if wins[0] == 0 || wins[1] == 0 {
		t.Fatalf("wins = %v, want both neighbours to win for some seed", wins)
	}
}

func TestSimultaneousResolutionOrder(t *testing.T) {
	tb, _ := NewTable(cfg(5, Simultaneous))
	// Round 1: 0 takes fork 0 (left), 1 takes fork 2 (right).
	ok := tb.Resolve([]string{PickUpLeft, PickUpRight, Think, Think, Think})
	if !ok[0] || !ok[1] {
		t.Fatalf("round 1 ok = %v", ok)
	}
	// Round 2: 0 puts down fork 0 while 4 reaches right for fork 0: the
	// put-down comes first, so 4 gets it. 1 tries to eat with one fork:
	// fails. 2 puts down a fork it does not hold: fails. 3 picks up its
	// right fork (4), free: succeeds.
	ok = tb.Resolve([]string{PutDownLeft, Eat, PutDownLeft, PickUpRight, PickUpRight})
	want := []bool{true, false, false, true, true}
	for i := range want {
		if ok[i] != want[i] {
			t.Fatalf("round 2 ok = %v, want %v", ok, want)
		}
	}
	if s := tb.Observe(4); !s.Holding.Right || s.Holding.Left {
		t.Fatalf("philosopher 4 sees %+v, want holding right only", s.Holding)
	}
	// Picking up a fork you already hold fails.
	ok = tb.Resolve([]string{Think, PickUpRight, Think, Think, Think})
	if ok[1] {
		t.Fatal("picking up a held fork succeeded")
	}
}

func TestSimultaneousObservationIsSnapshot(t *testing.T) {
	tb, _ := NewTable(cfg(5, Simultaneous))
	tb.Resolve([]string{PickUpLeft, Think, Think, Think, Think})
	s := tb.Observe(4) // fork 0 is 4's right fork
	if s.Free.Right || s.Holding.Right {
		t.Fatalf("4 sees right fork free=%v holding=%v, want held by neighbour", s.Free.Right, s.Holding.Right)
	}
	if s.Round != 2 || s.Last == nil || s.Last.Action != Think || !s.Last.OK {
		t.Fatalf("state = %+v", s)
	}
}

func TestSequentialActsAtOnce(t *testing.T) {
	tb, _ := NewTable(cfg(5, Sequential))
	if !tb.Act(0, PickUpLeft) { // fork 0
		t.Fatal("0 pick up left failed")
	}
	if s := tb.Observe(4); s.Free.Right {
		t.Fatal("4 sees fork 0 free after 0 took it this round")
	}
	if tb.Act(4, PickUpRight) { // fork 0, already taken this round
		t.Fatal("4 took a fork 0 already held")
	}
	if !tb.Act(1, PickUpLeft) || tb.Act(0, Eat) {
		t.Fatal("1 should take fork 1; 0 cannot eat with one fork")
	}
	tb.EndRound()
	tb.Act(1, PutDownLeft)
	tb.Act(0, PickUpRight)
	if !tb.Act(0, Eat) {
		t.Fatal("0 holds both forks at its turn and should eat")
	}
}

func TestMaxMeals(t *testing.T) {
	for _, c := range []struct{ n, rounds, want int }{{5, 5, 6}, {10, 5, 15}, {15, 5, 21}, {2, 5, 3}, {5, 2, 0}, {5, 1, 0}} {
		if got := (EnvConfig{N: c.n, Rounds: c.rounds}).MaxMeals(); got != c.want {
			t.Errorf("MaxMeals(n=%d, rounds=%d) = %d, want %d", c.n, c.rounds, got, c.want)
		}
	}
}

func TestValidateNamesField(t *testing.T) {
	for _, c := range []struct {
		cfg  EnvConfig
		want string
	}{
		{EnvConfig{N: 1, Rounds: 5, Mode: Simultaneous, DeadlockPatience: 1}, "env.n = 1"},
		{EnvConfig{N: 5, Rounds: 0, Mode: Simultaneous, DeadlockPatience: 1}, "env.rounds = 0"},
		{EnvConfig{N: 5, Rounds: 5, Mode: "async", DeadlockPatience: 1}, `env.mode = "async": accepted: simultaneous, sequential`},
		{EnvConfig{N: 5, Rounds: 5, Mode: Sequential, DeadlockPatience: 0}, "env.deadlock_patience = 0"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want it to mention %q", c.cfg, err, c.want)
		}
	}
}

func TestStateLineIsStable(t *testing.T) {
	s := State{Round: 2, Rounds: 5, ID: 3, N: 5, Holding: Sides{Left: true}, Free: Sides{Right: true},
		Meals: 0, TableMeals: 1, Last: &LastEvent{Action: PickUpLeft, OK: true}}
	want := `state: {"round":2,"rounds":5,"id":3,"n":5,"holding":{"left":true,"right":false},"free":{"left":false,"right":true},"meals":0,"table_meals":1,"last":{"action":"pick_up_left","ok":true}}`
	if got := s.Line(); got != want {
		t.Fatalf("Line() =\n%s\nwant\n%s", got, want)
	}
	obs := Observation(s)
	back, err := ParseState(obs)
	if err != nil || back.Line() != want {
		t.Fatalf("ParseState(Observation) = %v, %v", back, err)
	}
	first := State{Round: 1, Rounds: 5, N: 5}
	if got := first.Line(); !strings.Contains(got, `"last":null`) {
		t.Fatalf("round-1 line %s lacks last:null", got)
	}
	if _, err := ParseState("no state here"); err == nil {
		t.Fatal("ParseState accepted text without a state line")
	}
}

// TestStateLineMatchesJSONMarshal: the hand-written line is the prefix and
// json.Marshal's encoding of the state, byte for byte.
func TestStateLineMatchesJSONMarshal(t *testing.T) {
	for _, s := range []State{
		{},
		{Round: 2, Rounds: 5, ID: 3, N: 5, Holding: Sides{Left: true}, Free: Sides{Right: true}, Meals: 7, TableMeals: 12, Last: &LastEvent{Action: PickUpLeft, OK: true}},
		{Round: -1, Rounds: 1 << 40, ID: 99, N: 15, Holding: Sides{true, true}, Free: Sides{true, true}, Last: &LastEvent{Action: "<&> \"quoted\" \u2028 \xff"}},
		{Last: &LastEvent{}},
	} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Line(), StatePrefix+string(b); got != want {
			t.Errorf("Line() =\n%s\nwant\n%s", got, want)
		}
	}
}

// TestObservationText pins the prose a philosopher reads, each sentence
// choice once, followed by the state line.
func TestObservationText(t *testing.T) {
	for _, tt := range []struct {
		s    State
		want string
	}{
		{State{Round: 1, Rounds: 5, ID: 0, N: 5, Free: Sides{true, true}},
			"Round 1 of 5. Your left fork is free. Your right fork is free. You have eaten 0 meal(s); the table 0. Choose one tool.\n"},
		{State{Round: 2, Rounds: 5, ID: 3, N: 5, Holding: Sides{Left: true}, Free: Sides{Right: true}, TableMeals: 1, Last: &LastEvent{Action: PickUpLeft, OK: true}},
			"Round 2 of 5. Your last action pick_up_left succeeded. You hold your left fork. Your right fork is free. You have eaten 0 meal(s); the table 1. Choose one tool.\n"},
		{State{Round: 12, Rounds: 40, ID: 14, N: 15, Holding: Sides{true, true}, Meals: 3, TableMeals: 27, Last: &LastEvent{Action: Eat}},
			"Round 12 of 40. Your last action eat failed. You hold your left fork. You hold your right fork. You have eaten 3 meal(s); the table 27. Choose one tool.\n"},
		{State{Round: 3, Rounds: 5, ID: 1, N: 5, Meals: 1, TableMeals: 2, Last: &LastEvent{Action: Invalid}},
			"Round 3 of 5. Your last reply was not a single valid tool call, so nothing happened. Your left fork is held by a neighbour. Your right fork is held by a neighbour. You have eaten 1 meal(s); the table 2. Choose one tool.\n"},
	} {
		if got, want := Observation(tt.s), tt.want+tt.s.Line(); got != want {
			t.Errorf("Observation =\n%q\nwant\n%q", got, want)
		}
		// One buffer, the string made of it and json.Marshal's of the
		// state line (the state, its encoding): an observation is built
		// for every philosopher every round.
		if n := testing.AllocsPerRun(50, func() { Observation(tt.s) }); n > 5 {
			t.Errorf("Observation: %v allocations, want at most 5", n)
		}
	}
}
