package art

// This file holds all of the package's HTTP plumbing: call for
// request/answer exchanges, through internal/httpx like every other client,
// and openStream for /_train_model, which is streamed and never retried.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/quote"
)

// maxBody bounds how much of a non-streaming answer is read; ART's answers
// are small except /openapi.json (tens of kilobytes).
const maxBody = 8 << 20

// encode marshals v without HTML escaping, so raw JSON inside v (the
// sampled choices) is sent as it was given, not with <, > and & rewritten.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// request is one exchange with the ART server.
type request struct {
	method string
	path   string
	query  url.Values
	body   any // JSON-encoded when not nil
	// idempotent requests are retried on transport errors, 429 and 5xx.
	// Only reads are: GETs, and /_get_step (a POST that only reads ART's
	// checkpoint directory).
	idempotent bool
	timeout    time.Duration
}

func (c *Client) url(path string, q url.Values) string {
	u := c.base.JoinPath(path)
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// call performs r through the shared HTTP client (internal/httpx: one
// retry loop, Retry-After, body cap) and decodes a 2xx JSON answer into
// out (when out is not nil; a *[]byte receives the body undecoded).
// Non-2xx answers become *StatusError with FastAPI's detail.
func (c *Client) call(ctx context.Context, r request, out any) error {
	var body []byte
	if r.body != nil {
		var err error
		if body, err = encode(r.body); err != nil {
			return fmt.Errorf("%s %s: encode body: %w", r.method, r.path, err)
		}
	}
	u := c.url(r.path, r.query)
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	hc := c.writes
	if r.idempotent {
		hc = c.reads
	}
	resp, _, err := hc.Do(ctx, &httpx.Request{Method: r.method, URL: u, Body: body})
	if err != nil {
		var se *httpx.StatusError
		if errors.As(err, &se) {
			return &StatusError{Method: r.method, URL: u, StatusCode: se.StatusCode, Detail: detail(se.Body)}
		}
		return fmt.Errorf("%s %s: %w", r.method, u, err)
	}
	switch o := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*o = resp.Body
		return nil
	}
	if err := json.Unmarshal(resp.Body, out); err != nil {
		return fmt.Errorf("%s %s: decode answer %s: %w", r.method, u, quote.Body(resp.Body), err)
	}
	return nil
}

// send makes one streaming request for openStream: its answer is read as
// it arrives, which httpx (it reads answers whole) does not do.
func (c *Client) send(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	return resp, nil
}

// openStream POSTs body to path and returns the response of a 2xx answer
// for the caller to read and close. It is never retried: /_train_model
// trains as it answers.
func (c *Client) openStream(ctx context.Context, path string, body any) (*http.Response, error) {
	data, err := encode(body)
	if err != nil {
		return nil, fmt.Errorf("POST %s: encode body: %w", path, err)
	}
	u := c.url(path, nil)
	resp, err := c.send(ctx, http.MethodPost, u, data)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		return nil, &StatusError{Method: http.MethodPost, URL: u, StatusCode: resp.StatusCode, Detail: detail(b)}
	}
	return resp, nil
}

// detail extracts FastAPI's {"detail": ...} from an error body, or quotes
// the body.
func detail(data []byte) string {
	var d struct {
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(data, &d) == nil && len(d.Detail) > 0 {
		var s string
		if json.Unmarshal(d.Detail, &s) == nil {
			return s
		}
		// A 422 lists validation errors: keep their locations and messages.
		var list []struct {
			Loc []any  `json:"loc"`
			Msg string `json:"msg"`
		}
		if json.Unmarshal(d.Detail, &list) == nil && len(list) > 0 {
			parts := make([]string, 0, len(list))
			for _, e := range list {
				loc := make([]string, len(e.Loc))
				for i, l := range e.Loc {
					loc[i] = fmt.Sprint(l)
				}
				parts = append(parts, strings.Join(loc, ".")+": "+e.Msg)
			}
			return strings.Join(parts, "; ")
		}
		return quote.Body(d.Detail)
	}
	return quote.Body(data)
}
