// Command grpo orchestrates GRPO fine-tuning of LLM agents on the Dining
// Philosophers table. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
)

func main() {
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
