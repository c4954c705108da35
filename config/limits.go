package config

import "fmt"

// Limits bound what one run may ask of a daemon, so that a posted config
// cannot exhaust its memory or time: they are checked before the run is
// stored. A zero field is no limit.
type Limits struct {
	MaxN               int // players at the table (env.n, validation.n, test.n, curriculum sizes)
	MaxRounds          int // env.rounds
	MaxEpisodesPerStep int // training episodes of a step, resamples included; a validation's or the test split's episodes, over all its sizes
	MaxSteps           int // run.steps
	// MaxStepSize bounds episodes x n x rounds^2 of a step's training
	// episodes (at its largest table size), of a validation and of the
	// test split (summed over their sizes): a step's memory, since every
	// turn of a conversation resends it so far (and a sampled turn keeps
	// its prompt's token ids). Each of the other limits alone let a run
	// take gigabytes: 4,096 episodes of 5 x 5 rounds took 2.8 GB, 16
	// episodes of 64 philosophers x 200 rounds over 6 GB.
	MaxStepSize int64
}

// DefaultLimits are the daemon's limits unless its operator sets others.
func DefaultLimits() Limits {
	return Limits{MaxN: 64, MaxRounds: 200, MaxEpisodesPerStep: 4096, MaxSteps: 100000, MaxStepSize: 500000}
}

// MachineLimits bound every run, wherever it is played: beyond them a
// step's episodes, or one table's agents, do not fit in one machine's
// memory (groups and episodes_per_group of a million each made grpo run
// allocate 24 GB before its first request, and n 100000 4.5 GB in its
// first minute). A daemon's Limits may not exceed them.
var MachineLimits = Limits{MaxN: 1000, MaxRounds: 10000, MaxEpisodesPerStep: 100000}

// Check reports the first value of c beyond l as an *Error naming the key
// and the limit.
func (l Limits) Check(c Config) error {
	return l.check(c, func(flag string) string { return " (a limit of this daemon: grpo serve --max-" + flag + ")" })
}

// check is Check with the hint that says whose limit it is, given the
// daemon's flag that sets it.
func (l Limits) check(c Config, hint func(flag string) string) error {
	over := func(v, limit int) bool { return limit > 0 && v > limit }
	if over(c.Env.N, l.MaxN) {
		return invalid("env.n", "is %d; at most %d"+hint("n"), c.Env.N, l.MaxN)
	}
	// The curriculum's sizes first: validation.n and test.n default to them.
	for i, n := range c.Curriculum.Promote.Sizes {
		if over(n, l.MaxN) {
			return invalid(keyIndex("curriculum.promote.sizes", i), "is %d; at most %d"+hint("n"), n, l.MaxN)
		}
	}
	if l.MaxN > 0 && c.Curriculum.Schedule != "" {
		if sched, err := ParseSchedule(c.Curriculum.Schedule); err == nil {
			for _, p := range sched {
				if p.N > l.MaxN {
					return invalid("curriculum.schedule", "sets n %d; at most %d"+hint("n"), p.N, l.MaxN)
				}
			}
		}
	}
	for i, n := range c.Validation.N {
		if over(n, l.MaxN) {
			return invalid(keyIndex("validation.n", i), "is %d; at most %d"+hint("n"), n, l.MaxN)
		}
	}
	for i, n := range c.Test.N {
		if over(n, l.MaxN) {
			return invalid(keyIndex("test.n", i), "is %d; at most %d"+hint("n"), n, l.MaxN)
		}
	}
	if over(c.Env.Rounds, l.MaxRounds) {
		return invalid("env.rounds", "is %d; at most %d"+hint("rounds"), c.Env.Rounds, l.MaxRounds)
	}
	if over(c.Run.Steps, l.MaxSteps) {
		return invalid("run.steps", "is %d; at most %d"+hint("steps"), c.Run.Steps, l.MaxSteps)
	}
	if l.MaxEpisodesPerStep > 0 {
		// Counted in int64 so that huge values cannot wrap below the limit.
		g := int64(max(c.GRPO.Groups, 0)) + int64(max(c.GRPO.MaxResamples, 0))
		per := g * int64(max(c.GRPO.EpisodesPerGroup, 0))
		if c.GRPO.EpisodesPerGroup > l.MaxEpisodesPerStep || g > int64(l.MaxEpisodesPerStep) || per > int64(l.MaxEpisodesPerStep) {
			return invalid("grpo", "groups %d + max_resamples %d of %d episodes each make %d episodes a step; at most %d"+hint("episodes"),
				c.GRPO.Groups, c.GRPO.MaxResamples, c.GRPO.EpisodesPerGroup, per, l.MaxEpisodesPerStep)
		}
		// A validation (and the test split) plays its episodes at every
		// one of its sizes.
		testSizes := len(c.TestSizes())
		for _, split := range []struct {
			key      string
			episodes int
			sizes    int
		}{{"validation", c.Validation.Episodes, len(c.Validation.N)}, {"test", c.Test.Episodes, testSizes}} {
			if over(split.episodes, l.MaxEpisodesPerStep) {
				return invalid(split.key+".episodes", "is %d; at most %d"+hint("episodes"), split.episodes, l.MaxEpisodesPerStep)
			}
			if total := int64(max(split.episodes, 0)) * int64(split.sizes); total > int64(l.MaxEpisodesPerStep) {
				return invalid(split.key, "%d episodes at each of %d table sizes make %d; at most %d"+hint("episodes"),
					split.episodes, split.sizes, total, l.MaxEpisodesPerStep)
			}
		}
	}
	return l.checkStepSize(c, hint)
}

// checkStepSize checks c against MaxStepSize.
func (l Limits) checkStepSize(c Config, hint func(flag string) string) error {
	if l.MaxStepSize <= 0 {
		return nil
	}
	r2 := int64(max(c.Env.Rounds, 0)) * int64(max(c.Env.Rounds, 0))
	sum := func(ns []int) (t int64) {
		for _, n := range ns {
			t += int64(max(n, 0))
		}
		return t
	}
	n := c.Env.N
	for _, s := range c.Curriculum.Promote.Sizes {
		n = max(n, s)
	}
	if sched, err := ParseSchedule(c.Curriculum.Schedule); err == nil {
		for _, p := range sched {
			n = max(n, p.N)
		}
	}
	episodes := (int64(max(c.GRPO.Groups, 0)) + int64(max(c.GRPO.MaxResamples, 0))) * int64(max(c.GRPO.EpisodesPerGroup, 0))
	for _, part := range []struct {
		key      string
		episodes int64
		n        int64 // philosophers over the sizes played
	}{{"grpo", episodes, int64(n)}, {"validation", int64(max(c.Validation.Episodes, 0)), sum(c.Validation.N)}, {"test", int64(max(c.Test.Episodes, 0)), sum(c.TestSizes())}} {
		// In floating point: huge values cannot wrap below the limit.
		if size := float64(part.episodes) * float64(part.n) * float64(r2); size > float64(l.MaxStepSize) {
			return invalid(part.key, "%d episodes x %d philosophers x %d rounds squared make a step of size %.0f; at most %d (memory grows so: each turn resends the conversation so far)"+hint("step-size"),
				part.episodes, part.n, c.Env.Rounds, size, l.MaxStepSize)
		}
	}
	return nil
}

func keyIndex(key string, i int) string { return fmt.Sprintf("%s[%d]", key, i) }
