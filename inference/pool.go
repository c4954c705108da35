package inference

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
)

var (
	_ rollout.Completer = (*Fleet)(nil)
	_ error             = (*EndpointError)(nil)
)

// ReadsEncodedMessages: a Fleet's endpoints are ChatClients
// (rollout.EncodedReader).
func (f *Fleet) ReadsEncodedMessages() bool { return true }

// Complete sends req to the live endpoint with the fewest requests in
// flight that is under its concurrency limit, waiting while every one is
// at its limit. A request that fails at its endpoint (after the chat
// client's retries: unreachable, timeout, 429/5xx, garbage), or whose
// endpoint is drained while it is in flight (cancelling it, when the fleet
// has another endpoint), drains that endpoint and is sent again to
// another. When that endpoint is the only live one, the
// request is sent to it again after a backoff (honouring Retry-After)
// until the retry budget (FleetOptions.Retry.Budget) since its first
// failure runs out, and only then drains it. When no endpoint is live, it
// waits for one to be readmitted for the outage window, then fails with
// ErrNoEndpoint. Errors that are the request's (a 400) are returned at
// once. The answer's Completion.Endpoint is the URL of the endpoint that
// gave it; the error of a request that was sent to an endpoint is an
// *EndpointError naming the last one.
func (f *Fleet) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	var r failures
	for {
		ep, epoch, epCtx, err := f.acquire(ctx, &r.since)
		if err != nil {
			return nil, acquireError(req, r.last, err)
		}
		comp, drained, err := f.send(ctx, ep, epCtx, req)
		f.release(ep)
		if err == nil {
			f.succeeded(ep)
			comp.Endpoint = ep.url
			return comp, nil
		}
		if err = f.failed(ctx, &r, ep, epoch, drained, err); err != nil {
			return nil, err
		}
	}
}

// EndpointError is the error of a Fleet request that was sent to an
// endpoint: Endpoint is the URL of the last one it was sent to, as in the
// endpoint label of the fleet's metrics. Its message is Err's (which names
// the endpoint when the endpoint failed the request).
type EndpointError struct {
	Endpoint string
	Err      error
}

func (e *EndpointError) Error() string { return e.Err.Error() }

func (e *EndpointError) Unwrap() error { return e.Err }

// failures is what Complete remembers of a request's failures.
type failures struct {
	since    time.Time      // when this request first found no endpoint or drained one
	failedAt time.Time      // when this request first failed
	b        *httpx.Backoff // paces resends to the only live endpoint
	last     *endpoint      // where it last failed
}

// failed handles a send to ep that failed with err: it returns nil when
// the request is to be sent again (after waiting to resend it to ep, or
// having drained ep), or the error Complete returns.
func (f *Fleet) failed(ctx context.Context, r *failures, ep *endpoint, epoch int, drained bool, err error) error {
	r.last = ep
	switch {
	case ctx.Err() != nil:
		return &EndpointError{Endpoint: ep.url, Err: err}
	case drained || endpointFailure(err):
		if r.failedAt.IsZero() {
			r.failedAt = f.now()
		}
		if !drained {
			if r.b == nil {
				r.b = f.opts.Retry.Backoff()
			}
			if d, ok := f.resendHere(ep, r.failedAt, r.b, err); ok {
				if werr := httpx.Sleep(ctx, d); werr != nil {
					return &EndpointError{Endpoint: ep.url, Err: fmt.Errorf("%w; last error: %v", werr, err)}
				}
				return nil
			}
		}
		f.drain(ep, epoch, err)
		if r.since.IsZero() {
			r.since = f.now()
		}
		return nil
	default:
		return &EndpointError{Endpoint: ep.url, Err: err}
	}
}

// acquireError is the error of a request that found no endpoint to send
// to; last, when not nil, is where it was sent before and failed.
func acquireError(req *rollout.Request, last *endpoint, err error) error {
	if !states(err, fmt.Sprintf("(model %q", req.Model)) {
		// An endpoint's last failure, when it was this model's
		// request, names it already.
		err = fmt.Errorf("chat completion (model %q): %w", req.Model, err)
	}
	if last != nil {
		return &EndpointError{Endpoint: last.url, Err: err}
	}
	return err
}

// send sends req to ep. When the fleet has other endpoints, the request
// is cancelled if ep is drained meanwhile (drained reports it), so that
// Complete sends it to another at once. The only endpoint's requests are
// left to end by themselves: there is nowhere else to send them, one that
// succeeds is not wasted, one that fails waits for ep's readmission like
// any other — and no cancellation context is made per call.
func (f *Fleet) send(ctx context.Context, ep *endpoint, epCtx context.Context, req *rollout.Request) (comp *rollout.Completion, drained bool, err error) {
	if len(f.eps) == 1 {
		comp, err = ep.chat.Complete(ctx, req)
		return comp, false, err
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(epCtx, cancel)
	comp, err = ep.chat.Complete(rctx, req)
	drained = !stop()
	cancel()
	return comp, drained, err
}

// resendHere decides whether a request that failed at ep (first at
// failedAt) is sent to ep again rather than draining it: when ep is the
// only live endpoint and the wait before the resend, returned, ends
// within the retry budget.
func (f *Fleet) resendHere(ep *endpoint, failedAt time.Time, b *httpx.Backoff, err error) (time.Duration, bool) {
	budget := f.opts.Retry.Budget
	if budget <= 0 {
		return 0, false
	}
	if !f.onlyLive(ep) {
		return 0, false
	}
	var retryAfter time.Duration
	var se *httpx.StatusError
	if errors.As(err, &se) {
		retryAfter = se.RetryAfter
	}
	d := b.Next(retryAfter)
	if f.now().Add(d).After(failedAt.Add(budget)) {
		return 0, false
	}
	return d, true
}

// acquire takes a slot at an endpoint, waiting while none is free. since
// is when the caller's wait for a live endpoint began (set here when it
// finds none); it fails once the outage window has passed since then.
func (f *Fleet) acquire(ctx context.Context, since *time.Time) (*endpoint, int, context.Context, error) {
	for {
		f.mu.Lock()
		if ep := f.pickLocked(); ep != nil {
			ep.inflight++
			ep.peak = max(ep.peak, ep.inflight)
			f.inflight++
			epoch, epCtx := ep.epoch, ep.ctx
			f.mu.Unlock()
			return ep, epoch, epCtx, nil
		}
		wait := f.changed
		var timeout <-chan time.Time
		if !f.anyLiveLocked() {
			if since.IsZero() {
				*since = f.now()
			}
			rem := since.Add(f.opts.OutageWindow).Sub(f.now())
			if rem <= 0 {
				err := f.noneLiveLocked()
				f.mu.Unlock()
				return nil, 0, nil, err
			}
			t := time.NewTimer(rem)
			defer t.Stop()
			timeout = t.C
		}
		f.waiting++
		f.mu.Unlock()
		select {
		case <-wait:
		case <-timeout:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, 0, nil, err
		}
	}
}

// waitLive waits until an endpoint is live, for the outage window since
// the wait began.
func (f *Fleet) waitLive(ctx context.Context, since time.Time) error {
	for {
		f.mu.Lock()
		if f.anyLiveLocked() {
			f.mu.Unlock()
			return nil
		}
		rem := since.Add(f.opts.OutageWindow).Sub(f.now())
		if rem <= 0 {
			err := f.noneLiveLocked()
			f.mu.Unlock()
			return err
		}
		wait := f.changed
		f.waiting++
		f.mu.Unlock()
		t := time.NewTimer(rem)
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f.mu.Lock()
		f.waiting--
		f.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// pickLocked is the live endpoint under its limit with the fewest requests
// in flight (ties go round the endpoints), or nil when none is free or the
// fleet is at its overall concurrency.
func (f *Fleet) pickLocked() *endpoint {
	if f.inflight >= f.opts.Concurrency {
		return nil
	}
	var best *endpoint
	n := len(f.eps)
	for k := range n {
		ep := f.eps[(f.rr+k)%n]
		if ep.live && ep.inflight < ep.limit && (best == nil || ep.inflight < best.inflight) {
			best = ep
		}
	}
	if best != nil {
		f.rr = (f.rr + 1) % n
	}
	return best
}

func (f *Fleet) anyLiveLocked() bool {
	for _, ep := range f.eps {
		if ep.live {
			return true
		}
	}
	return false
}

// noneLiveLocked is the error of a wait for a live endpoint that ran out,
// naming each endpoint's last failure.
func (f *Fleet) noneLiveLocked() error {
	var errs []error
	for _, ep := range f.eps {
		if ep.lastErr != nil {
			errs = append(errs, ep.named(ep.lastErr))
		}
	}
	if f.opts.OutageWindow < 0 {
		// A fleet that does not wait (grpo eval --run) says so.
		return fmt.Errorf("%w: %w", ErrNoEndpoint, errors.Join(errs...))
	}
	return fmt.Errorf("%w after waiting %s for one to come back: %w", ErrNoEndpoint, f.opts.OutageWindow, errors.Join(errs...))
}

func (f *Fleet) release(ep *endpoint) {
	f.mu.Lock()
	ep.inflight--
	f.inflight--
	if f.waiting > 0 {
		f.signalLocked()
	}
	f.mu.Unlock()
}

func (f *Fleet) succeeded(ep *endpoint) {
	f.mu.Lock()
	ep.drains = 0
	f.mu.Unlock()
}

// signalLocked wakes every waiter.
func (f *Fleet) signalLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// drain stops sending to ep after err: its requests in flight are
// cancelled (and sent elsewhere by Complete), and it is probed back after
// a delay that doubles with each drain without a success in between.
// epoch, when not negative, is the endpoint's epoch the failing request
// saw: a failure from before a readmission does not drain it again.
func (f *Fleet) drain(ep *endpoint, epoch int, err error) {
	f.mu.Lock()
	if !ep.live || (epoch >= 0 && epoch != ep.epoch) {
		f.mu.Unlock()
		return
	}
	ep.live = false
	ep.epoch++
	ep.lastErr = err
	ep.cancel()
	backoff := f.opts.ProbeInterval << min(ep.drains, 5)
	ep.drains++
	ep.retryAt = f.now().Add(backoff)
	ep.m.setUp(false)
	ep.m.drained()
	f.signalLocked()
	ep.changes++
	change := ep.changes
	f.mu.Unlock()
	f.opts.Logger.Warn("inference endpoint drained", "endpoint", ep.url, "err", err, "probe_in", backoff)
	f.changedEndpoint(ep, change, EndpointChange{URL: ep.url, Err: err, ProbeIn: backoff, ProbeEvery: f.opts.ProbeInterval})
}

// changedEndpoint tells FleetOptions.OnEndpoint, if set, of ep's change
// number change (ep.changes when it was made). It is called after the
// fleet's lock is released, so a later change may be told first: then
// this one, no longer true, is not told.
func (f *Fleet) changedEndpoint(ep *endpoint, change int, c EndpointChange) {
	if f.opts.OnEndpoint == nil {
		return
	}
	f.tellMu.Lock()
	defer f.tellMu.Unlock()
	if change <= ep.told {
		return
	}
	ep.told = change
	f.opts.OnEndpoint(c)
}
