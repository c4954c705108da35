package httpx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// DefaultMaxBody is the largest answer a Client reads unless told
// otherwise: chat completions with logprobs of long answers run to
// megabytes; anything far beyond is a misrouted URL or a runaway model.
const DefaultMaxBody = 16 << 20

// DefaultPoolSize is the idle connections kept per host by the shared
// default HTTP client.
const DefaultPoolSize = 256

// NewHTTPClient returns a net/http client whose connection pool keeps
// concurrency idle connections per host (at least 2), so that a run with
// that many requests in flight reuses its connections instead of opening
// new ones. Clients of one run share one: build it once from
// inference.concurrency and pass it to every client. logger, when not
// nil, is warned of slow connections (slowDialer).
//
// It sets no response-header timeout: a Client's per-attempt timeout
// (Options.Timeout, inference.request_timeout) bounds the wait for an
// answer, and a fixed one here would cut a long generation short.
func NewHTTPClient(concurrency int, logger *slog.Logger) *http.Client {
	perHost := max(concurrency, 2)
	d := &slowDialer{
		dialer: net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		logger: logger, after: slowDial, now: time.Now,
	}
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true, // for https; plain http stays HTTP/1.1
		MaxIdleConns:          max(100, perHost),
		MaxIdleConnsPerHost:   perHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Answers are JSON read whole on loopback or a LAN: gzip would
		// cost both sides CPU to save bandwidth nobody is short of.
		DisableCompression: true,
		// Each connection keeps its read buffer while it lives, idle or
		// not. An answer is read into one buffer of its announced length
		// (readBody), which bufio fills straight from the socket once its
		// own buffer is empty, so that one only needs the status line,
		// the headers and a small answer. An answer of up to 1 KB with its
		// headers takes one read either way, one over 4 KB about as many
		// with 1 KB as with Go's default 4 KB, one in between one more;
		// at 2,000 connections the default holds 6 MB more live heap,
		// which the collector's goal (GOGC=100) doubles. The write buffer
		// stays at 4 KB: at 1 KB a request under 4 KB takes two writes
		// instead of one, 0.6 more a call in `grpo bench`'s rollout row,
		// whose CPU per call rose 10-15%.
		ReadBufferSize: readBufferSize,
	}}
}

// readBufferSize is each connection's read buffer (NewHTTPClient).
const readBufferSize = 1 << 10

// DefaultHTTPClient is the client used when Options leave HTTPClient nil:
// one per process, pooling DefaultPoolSize connections per host.
var DefaultHTTPClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(DefaultPoolSize, nil) })

// slowDial is how long a TCP connect may take before it is warned of: a
// loopback or LAN handshake takes well under a millisecond, and one the
// server's kernel dropped (its listen backlog full) is sent again only
// after a second.
const slowDial = time.Second

// slowDialer dials with net.Dialer and warns logger (when not nil) of a
// connect that took slowDial or longer, at most once a minute per
// address.
type slowDialer struct {
	dialer net.Dialer
	logger *slog.Logger
	after  time.Duration
	now    func() time.Time

	mu     sync.Mutex
	warned map[string]time.Time // when each address was last warned of
}

func (d *slowDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	start := d.now()
	c, err := d.dialer.DialContext(ctx, network, addr)
	if err == nil && d.logger != nil {
		d.note(addr, d.now().Sub(start))
	}
	return c, err
}

// note warns of a connect to addr that took took, if that is slow and
// addr was not warned of in the last minute.
func (d *slowDialer) note(addr string, took time.Duration) {
	if took < d.after {
		return
	}
	now := d.now()
	d.mu.Lock()
	if last, ok := d.warned[addr]; ok && now.Sub(last) < time.Minute {
		d.mu.Unlock()
		return
	}
	if d.warned == nil {
		d.warned = map[string]time.Time{}
	}
	d.warned[addr] = now
	d.mu.Unlock()
	d.logger.Warn("slow TCP connect", "addr", addr, "took", took.Round(time.Millisecond),
		"hint", "a server whose listen backlog is smaller than the connections opened at once drops the handshakes beyond it, and they are sent again after 1 s, 3 s, 7 s...: raise its backlog (uvicorn --backlog, net.core.somaxconn) or lower the concurrency; on a busy machine, this process may also have waited for the CPU")
}

// Options configure a Client. Retry is used as given (its zero value
// sends each request once); the other zero values take the defaults.
type Options struct {
	HTTPClient  *http.Client  // default DefaultHTTPClient()
	Retry       Policy        // see Policy; DefaultPolicy() is a good start
	Timeout     time.Duration // per attempt, reading the answer included; 0: none beyond the context
	MaxBody     int64         // largest answer read; default DefaultMaxBody
	BearerToken string        // sent as "Authorization: Bearer ..."; never logged
}

// Client sends requests with retries. It is safe for concurrent use.
type Client struct {
	hc      *http.Client
	policy  Policy
	timeout time.Duration
	maxBody int64
	auth    string // the Authorization header's value, "" for none

	sleep func(context.Context, time.Duration) error
	now   func() time.Time
}

// New returns a Client. It does no I/O.
func New(opts Options) *Client {
	c := &Client{
		hc:      opts.HTTPClient,
		policy:  opts.Retry.normalized(),
		timeout: max(opts.Timeout, 0),
		maxBody: opts.MaxBody,
		sleep:   Sleep,
		now:     time.Now,
	}
	if c.hc == nil {
		c.hc = DefaultHTTPClient()
	}
	if c.maxBody <= 0 {
		c.maxBody = DefaultMaxBody
	}
	if opts.BearerToken != "" {
		c.auth = "Bearer " + opts.BearerToken
	}
	return c
}

// Policy is the client's retry policy, normalised.
func (c *Client) Policy() Policy { return c.policy }

// Timeout is the per-attempt timeout, 0 for none.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Request is one request to send.
type Request struct {
	Method string
	URL    string
	Body   []byte // sent as application/json when not nil
	// Encode, when set instead of Body, makes the body of each attempt
	// (and of a resend net/http makes on a fresh connection); an error
	// ends Do before the attempt. The body is then held only until it is
	// written, not while the answer is awaited: a chat completion's
	// encoded conversation, at thousands of requests in flight, is much
	// of the heap.
	Encode func() ([]byte, error)
	Header http.Header // added to the request; may override Accept

	// Accept, if set, judges a 2xx answer: an error rejects it, and Do
	// returns that error as it is. RetryGarbage makes a rejected answer,
	// or one larger than the body cap, a transient failure: servers behind
	// a flaky proxy sometimes answer 200 with a truncated body.
	Accept       func(*Response) error
	RetryGarbage bool
}

// Response is an answer read whole.
type Response struct {
	Method     string
	URL        string
	StatusCode int
	Header     http.Header
	Body       []byte
}

// Do sends req until an attempt succeeds, fails permanently, the policy
// gives up or ctx ends. It returns the accepted answer and the number of
// attempts made. A non-2xx answer is a *StatusError; a per-attempt timeout
// a *TimeoutError; an answer over the cap a *GarbageError wrapping
// ErrTooLarge. When the policy gives up, the error is the last attempt's;
// when ctx ends during a wait, it wraps ctx.Err() and names the last.
func (c *Client) Do(ctx context.Context, req *Request) (*Response, int, error) {
	var deadline time.Time
	if c.policy.Budget > 0 {
		deadline = c.now().Add(c.policy.Budget)
	}
	var b *Backoff // made at the first retry
	for attempt := 1; ; attempt++ {
		body, err := req.body()
		if err != nil {
			return nil, attempt - 1, err
		}
		resp, rejected, err := c.send(ctx, req, body, c.attemptTimeout(deadline))
		if err == nil {
			rejected, err = req.accept(resp)
		}
		if err == nil {
			return resp, attempt, nil
		}
		if err = c.retry(ctx, req, attempt, rejected, err, &b, deadline); err != nil {
			return nil, attempt, err
		}
	}
}

// attemptTimeout is the next attempt's timeout: the client's, cut to what
// is left of the retry budget (which ends at deadline, when not zero).
func (c *Client) attemptTimeout(deadline time.Time) time.Duration {
	timeout := c.timeout
	if !deadline.IsZero() {
		if rem := deadline.Sub(c.now()); timeout == 0 || rem < timeout {
			timeout = max(rem, time.Millisecond)
		}
	}
	return timeout
}

// retry decides whether Do makes another attempt after the attempt-th
// failed with err, and waits for it: nil then, or the error Do returns.
// *b paces the attempts, made here at the first retry.
func (c *Client) retry(ctx context.Context, req *Request, attempt int, rejected bool, err error, b **Backoff, deadline time.Time) error {
	if ctx.Err() != nil || attempt > c.policy.Retries || !(IsTransient(err) || rejected && req.RetryGarbage) {
		return err
	}
	if *b == nil {
		*b = c.policy.Backoff()
	}
	var retryAfter time.Duration
	var se *StatusError
	if errors.As(err, &se) {
		retryAfter = se.RetryAfter
	}
	d := (*b).Next(retryAfter)
	if !deadline.IsZero() && c.now().Add(d).After(deadline) {
		return err
	}
	if werr := c.sleep(ctx, d); werr != nil {
		return fmt.Errorf("%w; last error: %v", werr, err)
	}
	return nil
}

// Send makes one attempt, with the client's timeout, body cap and error
// parsing but no retry: for callers that pace their own attempts, such as
// a poll loop (with IsTransient and a Backoff).
func (c *Client) Send(ctx context.Context, req *Request) (*Response, error) {
	body, err := req.body()
	if err != nil {
		return nil, err
	}
	resp, _, err := c.send(ctx, req, body, c.timeout)
	if err == nil {
		_, err = req.accept(resp)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// body is the body of r's next attempt: Body, or what Encode makes.
func (r *Request) body() ([]byte, error) {
	if r.Encode != nil {
		return r.Encode()
	}
	return r.Body, nil
}

// accept judges a 2xx answer by r.Accept.
func (r *Request) accept(resp *Response) (rejected bool, err error) {
	if r.Accept == nil {
		return false, nil
	}
	if err := r.Accept(resp); err != nil {
		return true, err
	}
	return false, nil
}

// send makes one attempt with body, its answer read whole within timeout
// (when not zero); rejected reports a 2xx answer over the body cap (Do
// and Send then ask Accept).
func (c *Client) send(ctx context.Context, r *Request, body []byte, timeout time.Duration) (resp *Response, rejected bool, err error) {
	actx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	hreq, err := c.newRequest(actx, r, body)
	if err != nil {
		return nil, false, err
	}
	hresp, err := c.hc.Do(hreq)
	if err != nil {
		return nil, false, attemptError(ctx, actx, timeout, err)
	}
	defer hresp.Body.Close()
	data, err := readBody(hresp, c.maxBody)
	if err != nil {
		return nil, false, attemptError(ctx, actx, timeout, fmt.Errorf("%s %s: read answer: %w", r.Method, r.URL, err))
	}
	over := int64(len(data)) > c.maxBody
	if over {
		data = data[:c.maxBody]
	}
	if hresp.StatusCode < 200 || hresp.StatusCode > 299 {
		se := ParseErrorBody(data)
		return nil, false, &StatusError{
			Method: r.Method, URL: r.URL, StatusCode: hresp.StatusCode,
			Message: se.Message, Type: se.Type, OpenAI: se.OpenAI,
			ContentType: hresp.Header.Get("Content-Type"), Body: data,
			RetryAfter: ParseRetryAfter(hresp.Header.Get("Retry-After"), c.now()),
		}
	}
	if over {
		return nil, true, &GarbageError{Body: fmt.Sprintf("(%s %s answered more than %d bytes)", r.Method, r.URL, c.maxBody), Err: ErrTooLarge}
	}
	return &Response{Method: r.Method, URL: r.URL, StatusCode: hresp.StatusCode, Header: hresp.Header, Body: data}, false, nil
}

// newRequest is the attempt's HTTP request with body: JSON accepted, and
// sent when there is a body, the bearer token and r's own headers.
func (c *Client) newRequest(ctx context.Context, r *Request, body []byte) (*http.Request, error) {
	var br *bytes.Reader
	var rd io.Reader
	if body != nil {
		// A *bytes.Reader: net/http writes the headers and the start of
		// a body it knows is in memory together, in one write.
		br = bytes.NewReader(body)
		rd = br
		if r.Encode != nil {
			// Once written, the reader lets go of the body; net/http
			// asks GetBody for another to send it again. (After a
			// failed write it keeps the body, which net/http may send
			// again as it is when it wrote none of it.)
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
				WroteRequest: func(w httptrace.WroteRequestInfo) {
					if w.Err == nil {
						br.Reset(nil)
					}
				},
			})
		}
	}
	hreq, err := http.NewRequestWithContext(ctx, r.Method, r.URL, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hreq.Header["Content-Type"] = jsonValue
		if r.Encode != nil {
			hreq.GetBody = r.getBody // NewRequest's would hold body
		}
	}
	hreq.Header["Accept"] = jsonValue
	if c.auth != "" {
		hreq.Header.Set("Authorization", c.auth)
	}
	for k, v := range r.Header {
		hreq.Header[k] = v
	}
	return hreq, nil
}

// getBody makes the body again, for net/http to send the request again.
func (r *Request) getBody() (io.ReadCloser, error) {
	b, err := r.Encode()
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// jsonValue is the value of Content-Type and Accept; net/http only reads
// a request's header.
var jsonValue = []string{"application/json"}

// readBody reads at most max+1 bytes of the answer, into one buffer of
// the announced length when there is one (io.ReadAll grows its buffer from
// 512 bytes, copying it at each step).
func readBody(resp *http.Response, max int64) ([]byte, error) {
	n := resp.ContentLength
	if n <= 0 || n > max {
		return io.ReadAll(io.LimitReader(resp.Body, max+1))
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, err
	}
	// The end of the body is read (net/http reuses the connection then);
	// whatever follows instead, from a round tripper that does not hold
	// the body to its announced length, is read as io.ReadAll would have.
	var one [1]byte
	k, err := resp.Body.Read(one[:])
	if k == 0 && err == io.EOF {
		return buf, nil
	}
	buf = append(buf, one[:k]...)
	if err == io.EOF {
		return buf, nil
	}
	if err != nil {
		return buf, err
	}
	rest, err := io.ReadAll(io.LimitReader(resp.Body, max-n-int64(k)+1))
	return append(buf, rest...), err
}

// attemptError turns the expiry of an attempt's own timeout (actx's),
// while the caller's context lives, into a TimeoutError.
func attemptError(ctx, actx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() == nil && actx.Err() == context.DeadlineExceeded {
		return &TimeoutError{After: timeout}
	}
	return err
}

// Sleep waits d or until ctx ends, and returns ctx.Err() if it ended.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
