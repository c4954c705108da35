package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// Wait polls the job until it reaches a terminal state and returns its last
// state. Polls back off from the poll interval to the maximum; onUpdate, if
// not nil, is called when the state or progress changes.
//
// A failed or cancelled job returns a *JobError. Transient poll failures are
// retried, up to MaxPollErrors in a row and for at least PollOutage since
// the first of them. Past timeout (if positive) Wait
// cancels the job, best effort, and returns an error wrapping ErrJobTimeout.
// When ctx ends Wait returns an error wrapping ctx.Err() and leaves the job
// running, so a restarted orchestrator can reattach with Wait, or Submit of
// the same request. Every error names the job once: "trainer job ID
// failed: ..." (the *JobError), "wait for trainer job ID: ..." otherwise.
func (c *JobClient) Wait(ctx context.Context, id string, timeout time.Duration, onUpdate func(Job)) (Job, error) {
	waitCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		waitCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	var (
		last   Job
		seen   bool
		errs   int
		since  time.Time // the first of the errs failed polls
		b      = c.pollBackoff()
		result = func(err error) (Job, error) {
			if ctx.Err() != nil {
				return last, fmt.Errorf("wait for trainer job %s: %w", id, ctx.Err())
			}
			if waitCtx.Err() != nil {
				return last, c.timedOut(ctx, id, timeout, last)
			}
			return last, err
		}
	)
	for {
		job, err := c.get(waitCtx, id)
		switch {
		case err == nil:
			errs = 0
			if !seen || job.State != last.State || job.Progress != last.Progress {
				// A moving job is worth watching closely again.
				b.Reset()
				if onUpdate != nil {
					onUpdate(job)
				}
			}
			last, seen = job, true
			switch job.State {
			case StateSucceeded:
				return job, nil
			case StateFailed, StateCancelled:
				return job, &JobError{ID: id, State: job.State, Message: job.Error}
			}
		case waitCtx.Err() != nil:
			return result(nil)
		case !httpx.IsTransient(err):
			return result(fmt.Errorf("wait for trainer job %s: %w", id, err))
		default:
			if errs == 0 {
				since = time.Now()
			}
			errs++
			if errs > c.maxPollErrors && time.Since(since) >= c.pollOutage {
				return result(fmt.Errorf("wait for trainer job %s: %d polls failed in a row over %s: %w", id, errs, time.Since(since).Round(time.Millisecond), err))
			}
		}
		if err := httpx.Sleep(waitCtx, b.Next(retryAfter(err))); err != nil {
			return result(nil)
		}
	}
}

// timedOut cancels a job that outlived its timeout, on a context that
// survives the wait's deadline, and reports the timeout.
func (c *JobClient) timedOut(ctx context.Context, id string, timeout time.Duration, last Job) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.requestTimeout)
	defer cancel()
	state := last.State
	if state == "" {
		state = "unknown"
	}
	if err := c.Cancel(cctx, id); err != nil {
		return fmt.Errorf("wait for trainer job %s: still %s after %s (%v): %w", id, state, timeout, err, ErrJobTimeout)
	}
	return fmt.Errorf("wait for trainer job %s: still %s after %s, cancelled it: %w", id, state, timeout, ErrJobTimeout)
}
