package httpx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBody is the largest answer a Client reads unless told
// otherwise: chat completions with logprobs of long answers run to
// megabytes; anything far beyond is a misrouted URL or a runaway model.
const DefaultMaxBody = 16 << 20

// DefaultPoolSize is the idle connections kept per host by the shared
// default HTTP client.
const DefaultPoolSize = 256

// NewHTTPClient returns an HTTP client with keep-alive (Transport, over
// net/http's for https and proxies) whose connection
// pool keeps concurrency idle connections per host (at least 2), so that a
// run with that many requests in flight reuses its connections instead of
// opening new ones. Clients of one run share one: build it once from
// inference.concurrency and pass it to every client. logger, when not
// nil, is warned of slow connections (Transport.Logger).
func NewHTTPClient(concurrency int, logger *slog.Logger) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(concurrency, 2)
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	tr.DisableKeepAlives = false
	return &http.Client{Transport: &Transport{MaxIdlePerHost: tr.MaxIdleConnsPerHost, Fallback: tr, Proxy: tr.Proxy, Logger: logger}}
}

// DefaultHTTPClient is the client used when Options leave HTTPClient nil:
// one per process, pooling DefaultPoolSize connections per host.
var DefaultHTTPClient = sync.OnceValue(func() *http.Client { return NewHTTPClient(DefaultPoolSize, nil) })

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
	auth    string
	// authValue and jsonValue are header values every request shares:
	// nothing that sends a request changes its header.
	authValue []string
	// headers are the header maps of requests without headers of their
	// own: without a body and with one. Read only.
	headers [2]http.Header
	targets targets

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
		c.authValue = []string{c.auth}
	}
	c.headers = [2]http.Header{c.header(false), c.header(true)}
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
	// Parts, when not nil, is the body in pieces, sent as their
	// concatenation (Transport copies them straight into the buffer it
	// writes, held only while writing: no body buffer lives for the whole
	// exchange); Body is then ignored.
	Parts  [][]byte
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
		resp, rejected, err := c.send(ctx, req, c.attemptTimeout(deadline))
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
// *b paces the attempts, made here at the first retry. Kept out of Do
// (not inlined), its locals take no room in the frame of a caller that
// waits on the server, thousands at once (docs/PERFORMANCE.md, stacks).
//
//go:noinline
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
	resp, _, err := c.send(ctx, req, c.timeout)
	if err == nil {
		_, err = req.accept(resp)
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// accept judges a 2xx answer by r.Accept. It is called by Do and Send
// rather than by send: the caller's frames above are then fewer while
// Accept decodes the answer, thousands at once (docs/PERFORMANCE.md,
// stacks).
func (r *Request) accept(resp *Response) (rejected bool, err error) {
	if r.Accept == nil {
		return false, nil
	}
	if err := r.Accept(resp); err != nil {
		return true, err
	}
	return false, nil
}

// send makes one attempt; rejected reports a 2xx answer over the body
// cap (Do and Send then ask Accept).
func (c *Client) send(ctx context.Context, r *Request, timeout time.Duration) (resp *Response, rejected bool, err error) {
	// The attempt's deadline: Transport holds the connection to it itself
	// (no context, timer and cancellation hook per attempt); any other
	// round tripper gets it as a context.
	actx, tr := ctx, c.transport()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
		if tr == nil {
			var cancel context.CancelFunc
			actx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	hreq, err := c.newRequest(actx, r)
	if err != nil {
		return nil, false, err
	}
	var hresp *http.Response
	if tr != nil {
		hresp, err = c.roundTrip(tr, hreq, deadline)
	} else {
		hresp, err = c.hc.Do(hreq)
	}
	if err != nil {
		return nil, false, attemptError(ctx, actx, timeout, err)
	}
	return c.answer(ctx, actx, timeout, r, hresp)
}

// jsonValue is the value of Content-Type and Accept.
var jsonValue = []string{"application/json"}

// newRequest is the attempt's HTTP request. It and answer are send's but
// for the stack: kept out of send (not inlined), their locals take no room
// in the frame of a caller that waits on the server, thousands at once.
//
//go:noinline
func (c *Client) newRequest(actx context.Context, r *Request) (*http.Request, error) {
	if actx == nil {
		return nil, errors.New("net/http: nil Context")
	}
	t, err := c.targets.get(r.Method, r.URL)
	if err != nil {
		return nil, err
	}
	hreq := t.request(actx, r.Method)
	parts := r.Parts
	if parts == nil && r.Body != nil {
		parts = [][]byte{r.Body}
	}
	if parts != nil {
		b := newPartsBody(parts)
		hreq.Body, hreq.ContentLength = b, b.n
		hreq.GetBody = func() (io.ReadCloser, error) { return newPartsBody(parts), nil }
		if b.n == 0 {
			hreq.Body = http.NoBody
		}
	}
	if len(r.Header) == 0 {
		// Nothing that sends a request changes its header: requests
		// without headers of their own share the client's.
		hreq.Header = c.headers[0]
		if parts != nil {
			hreq.Header = c.headers[1]
		}
		return hreq, nil
	}
	hreq.Header = c.header(parts != nil)
	for k, v := range r.Header {
		hreq.Header[k] = v
	}
	return hreq, nil
}

// header is a new map of the headers every request of c carries, and
// Content-Type when it has a body.
func (c *Client) header(body bool) http.Header {
	h := make(http.Header, 3)
	if body {
		h["Content-Type"] = jsonValue
	}
	h["Accept"] = jsonValue
	if c.auth != "" {
		h["Authorization"] = c.authValue
	}
	return h
}

// targets are the URLs a client's requests went to, each parsed once (as
// http.NewRequestWithContext parses it), with its method checked: a
// client sends to a few URLs, many times each. Up to maxTargets are
// kept; others are parsed every time. The last one asked for is found
// without a key (an allocation) or a hash.
type targets struct {
	last atomic.Pointer[target] // the last one asked for: most clients send to one URL
	m    sync.Map               // method + " " + URL -> *target
	n    atomic.Int32
}

type target struct {
	method, raw string
	url         url.URL
	host        string
}

const maxTargets = 64

// request is what http.NewRequestWithContext returns for t's method and
// URL, but for the parse and the header map: a request of its own, with
// a URL of its own. Not inlined: the request is built in this frame, not
// in its caller's.
//
//go:noinline
func (t *target) request(ctx context.Context, method string) *http.Request {
	u := t.url
	return (&http.Request{
		Method: method, URL: &u, Host: t.host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}).WithContext(ctx)
}

func (ts *targets) get(method, raw string) (*target, error) {
	if t := ts.last.Load(); t != nil && t.method == method && t.raw == raw {
		return t, nil
	}
	key := method + " " + raw
	if t, ok := ts.m.Load(key); ok {
		ts.last.Store(t.(*target))
		return t.(*target), nil
	}
	req, err := http.NewRequest(method, raw, nil)
	if err != nil {
		return nil, err
	}
	t := &target{method: method, raw: raw, url: *req.URL, host: req.Host}
	if ts.n.Load() < maxTargets {
		if _, loaded := ts.m.LoadOrStore(key, t); !loaded {
			ts.n.Add(1)
		}
		ts.last.Store(t)
	}
	return t, nil
}

// answer reads and checks the answer to r.
//
//go:noinline
func (c *Client) answer(ctx, actx context.Context, timeout time.Duration, r *Request, hresp *http.Response) (resp *Response, rejected bool, err error) {
	defer hresp.Body.Close()
	data, err := readBody(hresp, c.maxBody)
	if err != nil {
		return nil, false, attemptError(ctx, actx, timeout, fmt.Errorf("%s %s: read answer: %w", r.Method, r.URL, err))
	}
	over := int64(len(data)) > c.maxBody
	if over {
		data = data[:c.maxBody]
	}
	resp = &Response{Method: r.Method, URL: r.URL, StatusCode: hresp.StatusCode, Header: hresp.Header, Body: data}
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
	return resp, false, nil
}

// transport is the client's Transport when it is of the plain kind
// NewHTTPClient builds (Transport, no cookie jar, redirect policy nor
// timeout), whose requests the client hands to it itself: http.Client's
// bookkeeping (a copy of the headers, the redirect loop, the deadline)
// costs CPU and, at thousands of requests in flight, the stack depth of
// every caller. Otherwise nil.
func (c *Client) transport() *Transport {
	tr, ok := c.hc.Transport.(*Transport)
	if !ok || c.hc.Jar != nil || c.hc.CheckRedirect != nil || c.hc.Timeout != 0 {
		return nil
	}
	return tr
}

// roundTrip sends hreq through tr, holding the exchange to deadline (when
// not zero) as well as to the request's context. An answer that redirects
// is asked again through http.Client, which follows it; errors are
// wrapped as http.Client wraps them.
func (c *Client) roundTrip(tr *Transport, hreq *http.Request, deadline time.Time) (*http.Response, error) {
	resp, err := tr.roundTrip(hreq, deadline)
	if err != nil {
		return nil, roundTripError(hreq, err)
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return c.redirect(hreq, resp, deadline)
	}
	return resp, nil
}

// roundTripError is err as http.Client wraps it.
//
//go:noinline
func roundTripError(hreq *http.Request, err error) error {
	m := hreq.Method
	return &url.Error{Op: m[:1] + strings.ToLower(m[1:]), URL: hreq.URL.Redacted(), Err: err}
}

// redirect asks hreq, answered by the redirect resp, again through
// http.Client, which follows it.
//
//go:noinline
func (c *Client) redirect(hreq *http.Request, resp *http.Response, deadline time.Time) (*http.Response, error) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if hreq.GetBody != nil {
		var err error
		if hreq.Body, err = hreq.GetBody(); err != nil {
			return nil, err
		}
	}
	return withDeadline(hreq, deadline, c.hc.Do)
}

// cancelBody is the body of an answer read under its own deadline: an
// error it causes is errExpired, and closing the body ends the context.
type cancelBody struct {
	io.ReadCloser
	ctx, parent context.Context
	cancel      context.CancelFunc
}

func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() == context.DeadlineExceeded && b.parent.Err() == nil {
		err = fmt.Errorf("%w (%w)", err, errExpired)
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// partsBody is a request body in pieces, which Transport reads as they
// are (no Read calls). Reading it does not change the pieces: a retry
// sends them again.
type partsBody struct {
	parts  [][]byte
	n      int64 // the whole length
	i, off int   // the next byte to read: parts[i][off]
}

func newPartsBody(parts [][]byte) *partsBody {
	b := &partsBody{parts: parts}
	for _, p := range parts {
		b.n += int64(len(p))
	}
	return b
}

// unread reports whether no byte was read yet.
func (b *partsBody) unread() bool { return b.i == 0 && b.off == 0 }

func (b *partsBody) Read(p []byte) (int, error) {
	n := 0
	for b.i < len(b.parts) && n < len(p) {
		c := copy(p[n:], b.parts[b.i][b.off:])
		n += c
		if b.off += c; b.off == len(b.parts[b.i]) {
			b.i, b.off = b.i+1, 0
		}
	}
	if n == 0 && b.i == len(b.parts) && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (*partsBody) Close() error { return nil }

// readBody reads at most max+1 bytes of the answer, into one buffer of
// the announced length when there is one (io.ReadAll grows its buffer from
// 512 bytes, copying it at each step).
func readBody(resp *http.Response, max int64) ([]byte, error) {
	n := resp.ContentLength
	if n <= 0 || n > max {
		return readUpTo(resp.Body, max+1)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, err
	}
	// The end of the body is read (a transport reuses the connection
	// then); whatever follows instead (a peer that announced too little)
	// is read as io.ReadAll would have.
	var one [1]byte
	k, err := resp.Body.Read(one[:])
	if k == 0 && err == io.EOF {
		return buf, nil
	}
	buf = append(buf, one[:k]...)
	if err != nil {
		return buf, err
	}
	rest, err := readUpTo(resp.Body, max+1-n-int64(k))
	return append(buf, rest...), err
}

// readUpTo reads r to its end or to limit bytes, as
// io.ReadAll(io.LimitReader(r, limit)) does, in a frame a third of
// io.ReadAll's: answers without a length (chunked) are read at the
// bottom of every caller's stack (TestCallFitsA4KBStack).
func readUpTo(r io.Reader, limit int64) ([]byte, error) {
	buf := make([]byte, 0, min(limit, 512))
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // room to read into
		}
		n, err := r.Read(buf[len(buf):min(int64(cap(buf)), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// attemptError turns the expiry of an attempt's own timeout, while the
// caller's context lives, into a TimeoutError: actx's deadline, or the
// deadline Transport held the exchange to (errExpired).
func attemptError(ctx, actx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() == nil && (actx.Err() == context.DeadlineExceeded || errors.Is(err, errExpired)) {
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
