package trainer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// maxBody bounds how much of an answer is read: job answers are small, and a
// misrouted URL may stream something large.
const maxBody = 4 << 20

// StatusError is a non-2xx answer of the trainer; a 404 also matches
// ErrJobNotFound.
type StatusError = httpx.StatusError

// notFoundError is a 404 answer: errors.Is(err, ErrJobNotFound) holds and
// errors.As still finds the *StatusError.
type notFoundError struct{ *StatusError }

func (e notFoundError) Unwrap() []error { return []error{e.StatusError, ErrJobNotFound} }

var (
	_ error = notFoundError{}
	_ error = (*JobError)(nil)
)

// classify marks a 404 as ErrJobNotFound.
func classify(err error) error {
	var se *StatusError
	if errors.As(err, &se) && se.StatusCode == http.StatusNotFound {
		return notFoundError{se}
	}
	return err
}

// request sends a job API request with the client's retries; accept, if
// not nil, decodes a 2xx answer (its errors are final). A request that
// still fails transiently when the policy gives up says how often it
// tried.
func (c *JobClient) request(ctx context.Context, method, url string, body []byte, accept func(*httpx.Response) error) error {
	_, attempts, err := c.http.Do(ctx, &httpx.Request{Method: method, URL: url, Body: body, Accept: accept})
	if err == nil {
		return nil
	}
	err = classify(err)
	if ctx.Err() == nil && attempts > 1 && httpx.IsTransient(err) {
		return fmt.Errorf("gave up after %d attempts: %w", attempts, err)
	}
	return err
}

// once sends a single attempt, for Wait's poll loop, which paces its own.
func (c *JobClient) once(ctx context.Context, method, url string, accept func(*httpx.Response) error) error {
	_, err := c.http.Send(ctx, &httpx.Request{Method: method, URL: url, Accept: accept})
	return classify(err)
}

// retryAfter is the Retry-After of a status error, else 0.
func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
