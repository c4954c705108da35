package main

import (
	"flag"
	"time"

	"github.com/grpo-dev/grpo/config"
)

// givenFlags names the flags given on the command line, so that an
// explicit zero ("--steps 0") is told apart from a flag left unset.
func givenFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// atLeast refuses an integer flag below min, naming the flag and the
// accepted range.
func atLeast(name string, v, min int) error {
	if v < min {
		return usagef("--%s %d: need at least %d", name, v, min)
	}
	return nil
}

// within refuses a flag that sets a config key's value (--concurrency,
// inference.concurrency) outside the key's bound: the config package owns
// the rule, so the flag and the key accept the same values.
func within[T int | time.Duration](name string, v T, b config.Bound[T]) error {
	if msg := b.Check(v); msg != "" {
		return usagef("--%s %v: %s", name, v, msg)
	}
	return nil
}
