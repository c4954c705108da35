package rollout

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Mode is how a round's decisions are taken and resolved.
type Mode string

// Modes of play (DESIGN §2).
const (
	// Simultaneous: everyone decides on the same snapshot, then the round
	// resolves in a fixed order.
	Simultaneous Mode = "simultaneous"
	// Sequential: philosophers decide one at a time in id order, each on
	// the table left by the previous ones.
	Sequential Mode = "sequential"
)

// Modes lists the accepted modes; the first is the default.
var Modes = []Mode{Simultaneous, Sequential}

// EnvConfig parameterises one table.
type EnvConfig struct {
	N                int   `json:"n"`
	Rounds           int   `json:"rounds"`
	Mode             Mode  `json:"mode"`
	DeadlockPatience int   `json:"deadlock_patience"`
	Seed             int64 `json:"seed"`
}

// DefaultEnvConfig is the study's table: 5 philosophers, 5 rounds,
// simultaneous, deadlock after one stuck round.
func DefaultEnvConfig() EnvConfig {
	return EnvConfig{N: 5, Rounds: 5, Mode: Simultaneous, DeadlockPatience: 1}
}

// Validate reports the first bad field, naming what is accepted.
func (c EnvConfig) Validate() error {
	switch {
	case c.N < 2:
		return fmt.Errorf("env.n = %d: need at least 2 philosophers", c.N)
	case c.Rounds < 1:
		return fmt.Errorf("env.rounds = %d: need at least 1 round", c.Rounds)
	case !slices.Contains(Modes, c.Mode):
		return fmt.Errorf("env.mode = %q: accepted: %s", c.Mode, joinNames(Modes))
	case c.DeadlockPatience < 1:
		return fmt.Errorf("env.deadlock_patience = %d: need at least 1 round", c.DeadlockPatience)
	}
	return nil
}

// MaxMeals is M_max = floor(n/2) * max(0, rounds-2): two rounds to gather
// forks, then at most floor(n/2) eaters per round.
func (c EnvConfig) MaxMeals() int {
	return c.N / 2 * max(0, c.Rounds-2)
}

// Table is the state of one Dining Philosophers episode. Philosopher i sits
// between fork i (its left) and fork (i+1) mod n (its right). A Table is not
// safe for concurrent use; the episode runner drives it from one goroutine.
type Table struct {
	cfg   EnvConfig
	owner []int // fork -> holder id, or -1 when free
	snap  []int // owners at the start of the round (simultaneous mode)
	meals []int
	last  []*LastEvent
	rng   *rand.Rand

	round         int // 1-based round being played
	stuck         int // consecutive rounds that ended in circular wait
	done          bool
	deadlocked    bool
	deadlockRound int

	actions [len(ToolNames)]int
	failed  int
	invalid int
}

// NewTable seats cfg.N philosophers with every fork free.
func NewTable(cfg EnvConfig) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t := &Table{
		cfg:   cfg,
		owner: make([]int, cfg.N),
		snap:  make([]int, cfg.N),
		meals: make([]int, cfg.N),
		last:  make([]*LastEvent, cfg.N),
		rng:   rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		round: 1,
	}
	for f := range t.owner {
		t.owner[f] = -1
	}
	copy(t.snap, t.owner)
	return t, nil
}

// Round is the 1-based round being played.
func (t *Table) Round() int { return t.round }

// Done reports whether the episode is over.
func (t *Table) Done() bool { return t.done }

func (t *Table) left(i int) int  { return i }
func (t *Table) right(i int) int { return (i + 1) % t.cfg.N }

// Observe is philosopher id's view of the table it decides on: the round's
// snapshot in simultaneous mode, the current table in sequential mode.
func (t *Table) Observe(id int) State {
	owner := t.owner
	if t.cfg.Mode == Simultaneous {
		owner = t.snap
	}
	l, r := owner[t.left(id)], owner[t.right(id)]
	return State{
		Round:      t.round,
		Rounds:     t.cfg.Rounds,
		ID:         id,
		N:          t.cfg.N,
		Holding:    Sides{Left: l == id, Right: r == id},
		Free:       Sides{Left: l < 0, Right: r < 0},
		Meals:      t.meals[id],
		TableMeals: t.tableMeals(),
		Last:       t.last[id],
	}
}

func (t *Table) tableMeals() int {
	m := 0
	for _, x := range t.meals {
		m += x
	}
	return m
}

// Resolve plays one simultaneous round: actions[i] is philosopher i's tool
// name or Invalid. It returns whether each action succeeded and ends the
// round. Order: put-downs, eats (on the snapshot), pick-ups of forks free
// after the put-downs (contested forks go to a seeded coin flip), thinks.
func (t *Table) Resolve(actions []string) []bool {
	if len(actions) != t.cfg.N {
		panic(fmt.Sprintf("rollout: Resolve got %d actions for %d philosophers", len(actions), t.cfg.N))
	}
	ok := make([]bool, t.cfg.N)
	// 1. Put-downs release held forks.
	for i, a := range actions {
		switch a {
		case PutDownLeft:
			ok[i] = t.release(i, t.left(i))
		case PutDownRight:
			ok[i] = t.release(i, t.right(i))
		}
	}
	// 2. Eating needs both forks held at the snapshot.
	for i, a := range actions {
		if a == Eat && t.snap[t.left(i)] == i && t.snap[t.right(i)] == i {
			t.meals[i]++
			ok[i] = true
		}
	}
	// 3. Pick-ups claim forks free after step 1. Fork f can be claimed by
	// philosopher f (its left) and philosopher f-1 (its right).
	claim := make([]int, t.cfg.N) // fork -> first claimant, -1 none
	for f := range claim {
		claim[f] = -1
	}
	for i, a := range actions {
		var f int
		switch a {
		case PickUpLeft:
			f = t.left(i)
		case PickUpRight:
			f = t.right(i)
		default:
			continue
		}
		if t.owner[f] >= 0 {
			continue // held (by a neighbour, or by i itself): fails
		}
		if claim[f] < 0 {
			claim[f] = i
			continue
		}
		// Contested: two neighbours reach for the same free fork.
		if t.rng.IntN(2) == 1 {
			claim[f] = i
		}
	}
	for f, i := range claim {
		if i >= 0 {
			t.owner[f] = i
			ok[i] = true
		}
	}
	// 4. Think always succeeds.
	for i, a := range actions {
		if a == Think {
			ok[i] = true
		}
		t.record(i, a, ok[i])
	}
	t.endRound()
	return ok
}

// Act applies philosopher id's action at once (sequential mode) and returns
// whether it succeeded. Call EndRound after the last philosopher.
func (t *Table) Act(id int, action string) bool {
	ok := false
	switch action {
	case PutDownLeft:
		ok = t.release(id, t.left(id))
	case PutDownRight:
		ok = t.release(id, t.right(id))
	case Eat:
		if t.owner[t.left(id)] == id && t.owner[t.right(id)] == id {
			t.meals[id]++
			ok = true
		}
	case PickUpLeft:
		ok = t.take(id, t.left(id))
	case PickUpRight:
		ok = t.take(id, t.right(id))
	case Think:
		ok = true
	}
	t.record(id, action, ok)
	return ok
}

// EndRound closes a sequential round: deadlock check, round counter.
func (t *Table) EndRound() { t.endRound() }

func (t *Table) release(id, fork int) bool {
	if t.owner[fork] != id {
		return false
	}
	t.owner[fork] = -1
	return true
}

func (t *Table) take(id, fork int) bool {
	if t.owner[fork] >= 0 {
		return false
	}
	t.owner[fork] = id
	return true
}

func (t *Table) record(id int, action string, ok bool) {
	k := ToolIndex(action)
	if k >= 0 {
		t.actions[k]++
		if !ok {
			t.failed++
		}
	} else {
		k, ok = len(ToolNames), false
		t.invalid++
	}
	t.last[id] = &lastEvents[k][b2i(ok)]
}

// lastEvents are every LastEvent there can be, by tool (then invalid) and
// success, shared by all tables: a table records one per decision, and
// nothing changes one once made.
var lastEvents = func() (e [len(ToolNames) + 1][2]LastEvent) {
	for k := range e {
		action := Invalid
		if k < len(ToolNames) {
			action = ToolNames[k]
		}
		e[k] = [2]LastEvent{{Action: action}, {Action: action, OK: true}}
	}
	return e
}()

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (t *Table) endRound() {
	if t.done {
		return
	}
	if t.circularWait() {
		t.stuck++
	} else {
		t.stuck = 0
	}
	switch {
	case t.stuck >= t.cfg.DeadlockPatience:
		t.done, t.deadlocked, t.deadlockRound = true, true, t.round
	case t.round >= t.cfg.Rounds:
		t.done = true
	default:
		t.round++
	}
	copy(t.snap, t.owner)
}

// circularWait: every fork held and nobody holds two.
func (t *Table) circularWait() bool {
	for i := range t.cfg.N {
		if t.owner[t.left(i)] < 0 {
			return false
		}
		if t.owner[t.left(i)] == i && t.owner[t.right(i)] == i {
			return false
		}
	}
	return true
}

// Metrics summarises the table so far. LLM calls, tokens and errors are
// filled in by the episode runner.
func (t *Table) Metrics() Metrics {
	m := Metrics{
		N:             t.cfg.N,
		Rounds:        t.cfg.Rounds,
		Meals:         append([]int(nil), t.meals...),
		MaxMeals:      t.cfg.MaxMeals(),
		Deadlocked:    t.deadlocked,
		DeadlockRound: t.deadlockRound,
		RoundsPlayed:  t.roundsPlayed(),
		Actions:       make(map[string]int, len(ToolNames)),
		Failed:        t.failed,
		Invalid:       t.invalid,
	}
	for k, name := range ToolNames {
		m.Actions[name] = t.actions[k]
	}
	m.fill()
	return m
}

func (t *Table) roundsPlayed() int {
	if t.done {
		return t.round
	}
	return t.round - 1
}
