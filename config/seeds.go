package config

// TrainSeed is the table seed of training slot slot at step step (>= 1).
// Each step owns grpo.groups + grpo.max_resamples consecutive seeds, slot
// in [0, groups+max_resamples), whether or not resampling is on, so that
// turning it on does not move the seeds of later steps. Validate keeps
// them all below validation.seed.
func (c Config) TrainSeed(step, slot int) int64 {
	perStep := int64(c.GRPO.Groups) + int64(c.GRPO.MaxResamples)
	return c.Run.Seed + int64(step-1)*perStep + int64(slot)
}

// ValidationSeed is the seed of the i-th validation table (i >= 0).
func (c Config) ValidationSeed(i int) int64 {
	return c.Validation.Seed + int64(i)
}
