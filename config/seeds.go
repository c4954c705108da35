package config

// ReservedSpan is how many consecutive seeds from validation.seed and from
// test.seed are kept for held-out tables: hash-drawn training seeds never
// fall in [validation.seed, validation.seed+ReservedSpan) nor in
// [test.seed, test.seed+ReservedSpan), whatever episode counts a later
// `grpo eval --episodes` asks for.
const ReservedSpan = 1 << 24

// TrainSeed is the table seed of training slot slot at step step (>= 1):
// splitmix64 of (run.seed, step, slot), kept to 53 bits so that JSON
// readers using doubles see it exactly, and redrawn (by hashing again)
// while it falls in a reserved validation or test range. Seeds of
// different run.seed values are unrelated (independent replicates, not a
// shifted replay), and slot numbering is per step, so changing
// grpo.groups or grpo.max_resamples moves no other slot's seed.
func (c Config) TrainSeed(step, slot int) int64 {
	x := splitmix64(uint64(c.Run.Seed))
	x = splitmix64(x ^ uint64(int64(step)))
	x = splitmix64(x ^ uint64(int64(slot))*0xd1b54a32d192ed03)
	for {
		s := int64(x >> 11)
		if !c.reservedSeed(s) {
			return s
		}
		x = splitmix64(x)
	}
}

// reservedSeed reports whether s is in the validation or test range.
func (c Config) reservedSeed(s int64) bool {
	in := func(start int64) bool { return s >= start && s-start < ReservedSpan }
	return in(c.Validation.Seed) || in(c.Test.Seed)
}

// ValidationSeed is the seed of the i-th validation table (i >= 0).
func (c Config) ValidationSeed(i int) int64 {
	return c.Validation.Seed + int64(i)
}

// TestSeed is the seed of the i-th test table (i >= 0).
func (c Config) TestSeed(i int) int64 {
	return c.Test.Seed + int64(i)
}

// splitmix64 is one step of the SplitMix64 generator (Steele, Lea and
// Flood 2014): a bijective 64-bit mix.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
