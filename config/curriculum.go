package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Stage is one entry of a curriculum schedule: tables of N philosophers
// from training step From on.
type Stage struct {
	N    int `json:"n"`
	From int `json:"from"`
}

// ParseSchedule parses a curriculum schedule such as "5@0,10@6,15@11"
// (n=5 from step 0, n=10 from step 6, n=15 from step 11). The first stage
// starts at step 0 or 1 and covers step 0 either way; steps strictly
// increase; every n is at least 2. An empty string is no schedule.
func ParseSchedule(s string) ([]Stage, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var stages []Stage
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		ns, froms, ok := strings.Cut(item, "@")
		if !ok {
			return nil, fmt.Errorf("stage %q: write n@step, such as 5@0,10@6", item)
		}
		n, err := strconv.Atoi(strings.TrimSpace(ns))
		if err != nil {
			return nil, fmt.Errorf("stage %q: %q is not a table size", item, ns)
		}
		from, err := strconv.Atoi(strings.TrimSpace(froms))
		if err != nil {
			return nil, fmt.Errorf("stage %q: %q is not a step number", item, froms)
		}
		switch {
		case n < 2:
			return nil, fmt.Errorf("stage %q: n is %d; need at least 2 philosophers", item, n)
		case i == 0 && from != 0 && from != 1:
			return nil, fmt.Errorf("stage %q: the first stage must start at step 0 or 1", item)
		case i > 0 && from <= stages[i-1].From:
			return nil, fmt.Errorf("stage %q: starts at step %d, not after the previous stage's step %d; steps must increase", item, from, stages[i-1].From)
		}
		stages = append(stages, Stage{N: n, From: from})
	}
	return stages, nil
}

// TableSize is the number of philosophers at training step step: from
// curriculum.schedule when set, else from curriculum.promote.sizes after
// promoted promotions (clamped to the last size), else env.n. c should have
// passed Validate; an unparsable schedule counts as none.
func (c Config) TableSize(step, promoted int) int {
	if stages, err := ParseSchedule(c.Curriculum.Schedule); err == nil && len(stages) > 0 {
		n := stages[0].N
		for _, s := range stages[1:] {
			if s.From > step {
				break
			}
			n = s.N
		}
		return n
	}
	if sizes := c.Curriculum.Promote.Sizes; len(sizes) > 0 {
		return sizes[min(max(promoted, 0), len(sizes)-1)]
	}
	return c.Env.N
}

// TrainSizes are the table sizes the run trains at, each once, in the
// order it reaches them: the sizes of curriculum.schedule when set, else
// curriculum.promote.sizes, else env.n. They are validation.n when the
// document leaves it unset, and the test split's sizes when test.n lists
// none (TestSizes). An unparsable schedule counts as none (Validate
// refuses it).
func (c Config) TrainSizes() []int {
	var sizes []int
	if stages, err := ParseSchedule(c.Curriculum.Schedule); err == nil && len(stages) > 0 {
		for _, s := range stages {
			sizes = append(sizes, s.N)
		}
	} else if len(c.Curriculum.Promote.Sizes) > 0 {
		sizes = append(sizes, c.Curriculum.Promote.Sizes...)
	} else {
		return []int{c.Env.N}
	}
	var out []int
	for _, n := range sizes {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TestSizes are the table sizes the test split is measured at: test.n,
// or when it lists none, the sizes the run trains at (TrainSizes). Parse
// gives test.n this value when the document has a test section that
// leaves n unset; grpo eval, grpo compare and an experiment measure a
// config without test.n at it.
func (c Config) TestSizes() []int {
	if len(c.Test.N) > 0 {
		return c.Test.N
	}
	return c.TrainSizes()
}
