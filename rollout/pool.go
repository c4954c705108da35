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
				out[i] = r.Run(ctx, specs[i])
				if onDone != nil {
					onDone(i, out[i])
				}
			}
		}()
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
