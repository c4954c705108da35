package rollout

import (
	"context"
	"sync"
)

// RunAll plays specs with at most parallel episodes at once (the Limiter,
// if any, still bounds the requests in flight) and returns the episodes in
// spec order. onDone, when set, is called as each episode finishes, from
// the goroutine that played it.
func (r *Runner) RunAll(ctx context.Context, specs []EpisodeSpec, parallel int, onDone func(i int, ep Episode)) []Episode {
	out := make([]Episode, len(specs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(max(1, parallel), len(specs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r.run(ctx, &specs[i], &out[i])
				if onDone != nil {
					done(onDone, i, &out[i])
				}
			}
		}()
	}
	fed := 0
	for ; fed < len(specs); fed++ {
		select {
		case next <- fed:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(next)
	wg.Wait()
	// Cancelled: the episodes never started are errored, not played
	// (building each one would take as long as the rest of the work).
	for i := fed; i < len(specs); i++ {
		out[i].Errored, out[i].Error = true, ctx.Err().Error()
		out[i].Metrics.Errors = 1
	}
	return out
}

// done calls onDone(i, *ep).
func done(onDone func(int, Episode), i int, ep *Episode) { onDone(i, *ep) }
