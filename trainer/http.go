package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/grpo-dev/grpo/internal/quote"
)

// maxBody bounds how much of an answer is read: job answers are small, and a
// misrouted URL may stream something large.
const maxBody = 4 << 20

// answer is one HTTP exchange with a 2xx status.
type answer struct {
	url         string
	contentType string
	body        []byte
}

// roundTrip sends one request and returns a 2xx answer, or a *StatusError
// for any other status. Each attempt is bounded by the request timeout.
func (c *JobClient) roundTrip(ctx context.Context, method, url string, body []byte) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, c.requestTimeout)
	defer cancel()

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return answer{}, fmt.Errorf("%s %s: read answer: %w", method, url, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return answer{}, &StatusError{
			Method:     method,
			URL:        url,
			StatusCode: resp.StatusCode,
			Message:    bodyMessage(data),
			RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
		}
	}
	return answer{url: url, contentType: resp.Header.Get("Content-Type"), body: data}, nil
}

// retry runs fn until it succeeds, fails permanently, ctx ends, or it has
// failed transiently more than c.retries times. Backoff starts at the poll
// interval and doubles up to the maximum poll interval.
func (c *JobClient) retry(ctx context.Context, fn func(ctx context.Context) error) error {
	b := c.newBackoff()
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return err
		}
		if attempt >= c.retries {
			return fmt.Errorf("gave up after %d attempts: %w", attempt+1, err)
		}
		if err := sleep(ctx, b.next(err)); err != nil {
			return err
		}
	}
}

// transient reports whether err is worth retrying: the trainer is
// restarting, overloaded or briefly unreachable.
func transient(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		c := se.StatusCode
		return c == http.StatusTooManyRequests || (c >= 500 && c != http.StatusNotImplemented)
	}
	// An attempt that hit the request timeout while the caller's context
	// is alive is a slow trainer, not a cancelled caller.
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// backoff yields exponentially growing waits, capped.
type backoff struct {
	cur, max time.Duration
}

func (c *JobClient) newBackoff() *backoff {
	return &backoff{cur: c.pollInterval, max: c.maxPollInterval}
}

// next returns the wait before the next attempt and doubles the following
// one. A server's Retry-After hint, capped at max, wins when longer.
func (b *backoff) next(err error) time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	var se *StatusError
	if errors.As(err, &se) && se.RetryAfter > d {
		d = min(se.RetryAfter, b.max)
	}
	return d
}

// reset returns the backoff to its first step.
func (b *backoff) reset(d time.Duration) { b.cur = d }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retryAfter parses a Retry-After header given in seconds.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// bodyMessage extracts the error message of a non-2xx answer: the "error"
// or "message" field of a JSON body, else a quoted prefix of the body.
func bodyMessage(data []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  string          `json:"detail"`
	}
	if json.Unmarshal(data, &v) == nil {
		var s string
		var obj struct {
			Message string `json:"message"`
		}
		switch {
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			return obj.Message
		case v.Message != "":
			return v.Message
		case v.Detail != "":
			return v.Detail
		}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return "empty body"
	}
	return quote.Body(data)
}

// statusText is http.StatusText with a fallback for unknown codes.
func statusText(code int) string {
	if s := http.StatusText(code); s != "" {
		return s
	}
	return "status"
}
