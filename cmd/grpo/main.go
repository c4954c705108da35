// Command grpo orchestrates GRPO fine-tuning of LLM agents on the Dining
// Philosophers table. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
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
