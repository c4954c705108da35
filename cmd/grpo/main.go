// Command grpo orchestrates GRPO fine-tuning of LLM agents on the Dining
// Philosophers table. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// gcPercent is the collector's GOGC unless the environment sets one: with
// thousands of requests in flight the heap is small and short-lived and
// each collection scans thousands of waiting stacks, so collecting half
// as often saves about 8% of the CPU per call for about 13 MB more at
// 2,000 agents (docs/PERFORMANCE.md). GOGC=100 restores Go's default.
const gcPercent = 200

// configureGC sets the collector's target to gcPercent unless GOGC is set.
func configureGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

func main() {
	configureGC(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// The first signal starts a graceful stop; a second one aborts.
		<-ctx.Done()
		stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		fmt.Fprintln(os.Stderr, "grpo: second signal, aborting")
		os.Exit(130)
	}()
	os.Exit(NewMain().Run(ctx, os.Args[1:]))
}
