// Command grpo orchestrates GRPO fine-tuning of LLM agents on the Dining
// Philosophers table. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
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
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	var first atomic.Value // the signal that stopped the command
	go func() {
		// The first signal starts a graceful stop; a second one aborts.
		s := <-sigs
		first.Store(s)
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "grpo: second signal, aborting")
		os.Exit(signalExit(s))
	}()
	code := NewMain().Run(ctx, os.Args[1:])
	if s, ok := first.Load().(os.Signal); ok && code != 0 {
		// Stopped by a signal, as shells report it: 130 for Ctrl-C.
		code = signalExit(s)
	}
	os.Exit(code)
}

// signalExit is the exit status of a command stopped by s: 128 plus its
// number (130 for SIGINT, 143 for SIGTERM).
func signalExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}
