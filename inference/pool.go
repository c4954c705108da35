package inference

import (
	"context"
	"sync"

	"github.com/grpo-dev/grpo/rollout"
)

// Pool spreads chat completions over several endpoints (replicas serving
// the same models) by least outstanding requests.
type Pool struct {
	mu          sync.Mutex
	clients     []*ChatClient
	outstanding []int
}

var _ rollout.Completer = (*Pool)(nil)

// NewPool returns a pool over clients (at least one).
func NewPool(clients ...*ChatClient) *Pool {
	return &Pool{clients: clients, outstanding: make([]int, len(clients))}
}

// Complete sends req to the endpoint with the fewest requests in flight.
func (p *Pool) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	p.mu.Lock()
	best := 0
	for i, n := range p.outstanding {
		if n < p.outstanding[best] {
			best = i
		}
	}
	p.outstanding[best]++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.outstanding[best]--
		p.mu.Unlock()
	}()
	return p.clients[best].Complete(ctx, req)
}
