// Package httpx is the one HTTP request loop of grpo's clients: the chat
// client and the adapter admin client of package inference and the trainer
// job client all send through a Client, so a retry setting, a body cap or
// an error body means the same thing in each.
//
// A request is tried again when its failure is transient (IsTransient):
// 429, 5xx other than 501, connection refused or reset, a dropped
// connection, an attempt that outlived its timeout — and, when the request
// asks for it, a 2xx answer its Accept function rejects. Waits grow
// exponentially with jitter, a server's Retry-After is honoured, and every
// wait ends when the caller's context does.
package httpx

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of Policy, used by DefaultPolicy and for zero delays.
const (
	DefaultRetries   = 3
	DefaultBaseDelay = 200 * time.Millisecond
	DefaultMaxDelay  = 5 * time.Second
	DefaultJitter    = 0.5
)

// Policy says how often and how patiently a request that failed
// transiently is sent again.
//
// Retries is the number of extra attempts after the first: 0 sends a
// request once, 3 sends it at most four times; a negative value counts as
// 0. Budget, when positive, bounds the whole request (every attempt and
// every wait): no wait is started that would end past it, so a request
// gives up at the first of Retries and Budget. Config files' retry counts
// (inference.retries) are this Retries, unchanged.
type Policy struct {
	Retries int
	Budget  time.Duration

	// BaseDelay is the wait before the first retry, doubled before each
	// later one up to MaxDelay. A zero BaseDelay takes DefaultBaseDelay
	// (and, with a zero MaxDelay, DefaultMaxDelay); a MaxDelay at or below
	// BaseDelay keeps every wait at BaseDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// Jitter is the random share of each wait, in [0, 1]: a wait d is
	// drawn uniformly from [d*(1-Jitter), d], so that clients that failed
	// together do not retry together. 0 waits exactly d.
	Jitter float64
}

// DefaultPolicy is 3 retries, waits from 200ms doubling to 5s with half of
// each wait random, and no time budget.
func DefaultPolicy() Policy {
	return Policy{Retries: DefaultRetries, BaseDelay: DefaultBaseDelay, MaxDelay: DefaultMaxDelay, Jitter: DefaultJitter}
}

// Validate reports the first setting out of range, naming it as a config
// file would (retries, budget, base_delay, max_delay, jitter), so a config
// can delegate to it.
func (p Policy) Validate() error {
	switch {
	case p.Retries < 0:
		return fmt.Errorf("retries: is %d; need 0 or more (0 = none)", p.Retries)
	case p.Budget < 0:
		return fmt.Errorf("budget: is %s; need 0 (none) or more", p.Budget)
	case p.BaseDelay < 0:
		return fmt.Errorf("base_delay: is %s; need 0 (default %s) or more", p.BaseDelay, DefaultBaseDelay)
	case p.MaxDelay < 0:
		return fmt.Errorf("max_delay: is %s; need 0 (default %s) or more", p.MaxDelay, DefaultMaxDelay)
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return fmt.Errorf("jitter: is %v; need 0 to 1", p.Jitter)
	}
	return nil
}

// normalized fills zero delays with the defaults and clamps the rest.
func (p Policy) normalized() Policy {
	p.Retries = max(p.Retries, 0)
	p.Budget = max(p.Budget, 0)
	if p.BaseDelay <= 0 {
		p.BaseDelay = DefaultBaseDelay
		if p.MaxDelay <= 0 {
			p.MaxDelay = DefaultMaxDelay
		}
	}
	p.MaxDelay = max(p.MaxDelay, p.BaseDelay)
	p.Jitter = min(max(p.Jitter, 0), 1)
	return p
}

// Backoff yields the waits of one sequence of retries (or polls): BaseDelay,
// doubling up to MaxDelay, each shortened by up to Jitter at random. It is
// not safe for concurrent use.
type Backoff struct {
	p    Policy
	cur  time.Duration
	rand func() float64 // uniform in [0, 1); tests fix it
}

// Backoff starts a sequence of waits.
func (p Policy) Backoff() *Backoff {
	p = p.normalized()
	return &Backoff{p: p, cur: p.BaseDelay, rand: rand.Float64}
}

// Next returns the wait before the next attempt and doubles the following
// one. A server's Retry-After longer than that wait is honoured, up to
// MaxDelay: the wait is then exactly retryAfter, with no jitter, since the
// server said when.
func (b *Backoff) Next(retryAfter time.Duration) time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.p.MaxDelay)
	if b.p.Jitter > 0 {
		d -= time.Duration(b.p.Jitter * b.rand() * float64(d))
	}
	if retryAfter > d {
		d = min(retryAfter, b.p.MaxDelay)
	}
	return d
}

// Reset starts the sequence again from BaseDelay.
func (b *Backoff) Reset() { b.cur = b.p.BaseDelay }
