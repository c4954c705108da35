package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/trainer"
)

// The asynchronous pipeline (grpo.max_off_policy_steps = k > 0).
//
// Step t trains from the model current after step t-1. Its rollouts may
// be sampled with an older model, current after step t-1-k at the
// earliest, so that they run while earlier steps train and validate: as
// soon as the model of step v is current (its adapter loaded, or the step
// committed without a job), sampling starts for every step up to v+1+k.
// Submitting, loading and committing stay in step order, one job in
// flight at a time, so the store and the restart rules are those of the
// synchronous loop: samples taken ahead live in memory only, and a
// restarted run samples them again (same seeds, the model current then).
// With k = 0 nothing is sampled ahead: each step samples at its turn.

// policy is a model rollouts are sampled with: its served name and the
// step after which it was current.
type policy struct {
	model string
	step  int
}

// current is the model rollouts use now.
func (r *run) current() policy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return policy{model: r.modelLocked(), step: r.version}
}

// advance records that the model current after step s is the one in use.
func (r *run) advance(s int) {
	r.mu.Lock()
	r.version = s
	r.mu.Unlock()
}

// prefetch is one step's rollouts sampled ahead of its turn.
type prefetch struct {
	step, n int
	pol     policy
	done    chan struct{} // closed when batch or err is set
	batch   *batch
	err     error
	seconds float64
}

// pipeline holds the steps sampled ahead of their turn.
type pipeline struct {
	r      *run
	k      int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	next   int // first step whose sampling has not started
	ahead  map[int]*prefetch
	// reattach holds the steps whose jobs were submitted before a
	// restart: their rollouts are in the job, nothing is sampled for them.
	reattach map[int]bool
}

// newPipeline returns the run's pipeline; next is the first step that
// still needs rollouts.
func (r *run) newPipeline(ctx context.Context, next int) *pipeline {
	ctx, cancel := context.WithCancel(ctx)
	return &pipeline{r: r, k: r.cfg.GRPO.MaxOffPolicySteps, ctx: ctx, cancel: cancel, next: next, ahead: map[int]*prefetch{}, reattach: map[int]bool{}}
}

// fill starts sampling every step the bound allows with the current
// model: up to its step + 1 + k.
func (p *pipeline) fill() {
	if p.k == 0 {
		return
	}
	cur := p.r.current()
	for ; p.next <= min(cur.step+1+p.k, p.r.cfg.Run.Steps); p.next++ {
		if p.reattach[p.next] {
			continue
		}
		pol := cur
		if old, ok := p.r.past[max(0, p.next-1-p.k)]; ok && old.step < cur.step {
			pol = old
		}
		// Its table size: by the promotions of the validations up to
		// step next-2-k (step 0 for the first k+1 steps), the last ones
		// committed when it is sampled in step order, and so the same
		// after a restart, which has committed more.
		n := p.r.cfg.TableSize(p.next, p.r.promotionsThrough(max(p.next-2-p.k, 0)))
		f := &prefetch{step: p.next, n: n, pol: pol, done: make(chan struct{})}
		p.ahead[f.step] = f
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer close(f.done)
			t0 := time.Now()
			f.batch, f.err = p.r.sample(p.ctx, f.step, f.n, f.pol)
			f.seconds = time.Since(t0).Seconds()
		}()
	}
}

// take returns step s's batch and the seconds its sampling took: the one
// sampled ahead when its model is recent enough (at most k steps older
// than the model step s trains from), else one sampled now with the
// current model, counting the dropped episodes. n is the table size for
// a batch sampled now.
func (p *pipeline) take(ctx context.Context, s, n int) (*batch, float64, error) {
	p.next = max(p.next, s+1)
	f := p.ahead[s]
	delete(p.ahead, s)
	dropped := 0
	if f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
		if f.err != nil {
			return nil, 0, f.err
		}
		if !stale(s, f.pol.step, p.k) {
			return f.batch, f.seconds, nil
		}
		dropped = f.batch.stats.Episodes
		p.r.o.opts.Logger.Info("dropping rollouts sampled with a model too old", "run", p.r.name, "step", s,
			"policy_step", f.pol.step, "max_off_policy_steps", p.k, "episodes", dropped)
	}
	t0 := time.Now()
	b, err := p.r.sample(ctx, s, n, p.r.current())
	if err != nil {
		return nil, 0, err
	}
	b.stats.StaleDropped = dropped
	return b, time.Since(t0).Seconds(), nil
}

// stale reports whether rollouts sampled with the model current after
// step policyStep are too old for step s under bound k.
func stale(s, policyStep, k int) bool { return s-1-policyStep > k }

// models are the served names that rollouts sampled ahead still use.
func (p *pipeline) models() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, f := range p.ahead {
		out = append(out, f.pol.model)
	}
	return out
}

// restorePast prepares, after a restart, the models an uninterrupted run
// would sample its next steps with: step t samples with the model
// current after step max(0, t-1-k), which may be older than the newest.
// Their adapters are loaded again (before the newest is tracked, so that
// it is the last one pruned). after maps each committed step to the
// adapter in use after it (nil: the base model).
func (r *run) restorePast(ctx context.Context, after map[int]*trainer.Adapter) error {
	k := r.cfg.GRPO.MaxOffPolicySteps
	r.past = map[int]policy{}
	for t := r.last + 1; t <= r.last+1+k; t++ {
		v := max(0, t-1-k)
		a, ok := after[v]
		if v >= r.last || !ok {
			continue
		}
		pol := policy{model: r.cfg.Inference.Model, step: v}
		if a != nil {
			pol.model = r.servedName(a.Name)
			if r.adapter == nil || a.Name != r.adapter.Name {
				if err := r.o.opts.Adapters.LoadEverywhere(ctx, pol.model, a.Path); err != nil {
					return fmt.Errorf("reload adapter %s: %w", a.Name, err)
				}
				r.keeper.Track(pol.model)
			}
		}
		r.past[v] = pol
	}
	return nil
}

// stop cancels the sampling still under way and waits for it.
func (p *pipeline) stop() {
	p.cancel()
	p.wg.Wait()
}
