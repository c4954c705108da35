package httpx

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Transport is an HTTP/1.1 keep-alive transport for plain http:// requests
// whose body length is known: the requests a run sends to its inference
// servers, thousands in flight at once. net/http's Transport gives every
// connection a reader and a writer goroutine besides the caller's, writes
// a request in 4 KB pieces and builds a dozen objects per request; at
// 2,000 requests in flight those goroutines' stacks, their hand-offs and
// the extra write calls cost more CPU and memory per call than the rest
// of the orchestrator (docs/PERFORMANCE.md). This transport makes each
// exchange on the caller's goroutine: one write of the head and body, the
// common answer's head parsed here and any other by net/http's own
// http.ReadResponse, the connection kept
// for the next request once its body was read to the end.
//
// Everything else — https, a proxy from the environment, a body of unknown
// length, Expect: 100-continue — goes to Fallback.
type Transport struct {
	// MaxIdlePerHost is the idle connections kept per host (at least 1).
	MaxIdlePerHost int
	// Fallback carries the requests this transport does not.
	Fallback http.RoundTripper
	// Proxy, when set, is asked for each request; a request it sends
	// through a proxy goes to Fallback.
	Proxy func(*http.Request) (*url.URL, error)

	// Logger, when set, is warned of a connection that took longer than a
	// second to open (most often a server whose listen backlog overflowed),
	// at most once a minute per address.
	Logger *slog.Logger

	dialer        net.Dialer
	slowDialAfter time.Duration // slowDial when zero (tests shorten it)
	mu            sync.Mutex
	idle          map[string][]*pconn
	warned        map[string]time.Time // when each address was last warned of
}

// idleTimeout is how long an idle connection is kept: servers close idle
// connections after a few seconds (uvicorn: 5 s), and one found closed is
// replaced anyway, but a long-idle one is not worth the failed attempt.
const idleTimeout = 90 * time.Second

// readBufferSize is each connection's read buffer: an answer's head and
// the start of its body. Longer header lines are read in several pieces
// and a body beyond it is read straight into the caller's buffer, so it
// only has to be large enough for the common head (vLLM's and the fakes'
// are 100-200 bytes): thousands of connections each hold one.
const readBufferSize = 512

type pconn struct {
	net.Conn
	br       *bufio.Reader
	key      string
	idleFrom time.Time
	check    openCheck // see open
}

// RoundTrip sends req and returns its answer, whose body must be read to
// the end and closed for the connection to be used again.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, time.Time{})
}

// withDeadline sends req with send, holding the exchange, the answer's
// body included, to deadline (when not zero) by a context of its own; the
// errors that deadline causes are errExpired.
func withDeadline(req *http.Request, deadline time.Time, send func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	if deadline.IsZero() {
		return send(req)
	}
	ctx, cancel := context.WithDeadline(req.Context(), deadline)
	resp, err := send(req.WithContext(ctx))
	if err != nil {
		cancel()
		if ctx.Err() == context.DeadlineExceeded && req.Context().Err() == nil {
			return nil, fmt.Errorf("%w (%w)", err, errExpired)
		}
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, ctx: ctx, parent: req.Context(), cancel: cancel}
	return resp, nil
}

// errExpired is the error of an exchange whose own deadline passed, while
// its context lives.
var errExpired = errors.New("the attempt's deadline passed")

// roundTrip is RoundTrip holding the exchange, body included, to
// deadline as well (when not zero): the earlier of it and the context's
// deadline is the connection's. Fallback gets deadline as a context.
func (t *Transport) roundTrip(req *http.Request, deadline time.Time) (*http.Response, error) {
	if !t.handles(req) {
		return withDeadline(req, deadline, t.Fallback.RoundTrip)
	}
	head, body, err := wire(req)
	if err != nil {
		return nil, err
	}
	key := canonicalAddr(req)
	c := t.idleConn(key)
	if c == nil {
		if c, err = t.dialConn(req.Context(), deadline, key); err != nil {
			return nil, err
		}
	}
	resp, err := t.exchange(req.Context(), deadline, c, req, head, body)
	if err != nil {
		c.Close()
		return nil, err
	}
	return resp, nil
}

// wire is the request as it is written: its head, and its body in the
// pieces it is written from (or appended to head). Not inlined: its
// locals take no room in the frame of a caller that then waits on the
// server, thousands at once (docs/PERFORMANCE.md, stacks).
//
//go:noinline
func wire(req *http.Request) (head []byte, body [][]byte, err error) {
	if head, err = writeHead(req); err != nil {
		closeBody(req)
		return nil, nil, err
	}
	if pb, ok := req.Body.(*partsBody); ok && pb.n == req.ContentLength && pb.unread() {
		return head, pb.parts, nil // written from where they are
	}
	if head, err = appendBody(head, req); err != nil {
		return nil, nil, err
	}
	return head, nil, nil
}

// handles reports whether the request is one this transport sends itself.
func (t *Transport) handles(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" || req.Close ||
		req.Header.Get("Expect") != "" || req.Header.Get("Connection") != "" ||
		len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0 {
		return false // unknown length: net/http streams it chunked
	}
	if t.Proxy != nil {
		if u, err := t.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// writeHead is the request line and header. Header names and values are
// checked as net/http checks them, so a value cannot inject a header.
func writeHead(req *http.Request) ([]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	n := 128 + len(host) + len(req.URL.RequestURI())
	for k, vs := range req.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	b := make([]byte, 0, n)
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if !validToken(method) {
		return nil, fmt.Errorf("invalid method %q", method)
	}
	if !validValue(host) || strings.ContainsAny(host, " ") {
		return nil, fmt.Errorf("invalid host %q", host)
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, req.URL.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	if _, ok := req.Header["User-Agent"]; !ok {
		b = append(b, "User-Agent: grpo\r\n"...)
	}
	for k, vs := range req.Header {
		if !validToken(k) {
			return nil, fmt.Errorf("invalid header field name %q", k)
		}
		if http.CanonicalHeaderKey(k) == "Content-Length" || http.CanonicalHeaderKey(k) == "Host" {
			continue
		}
		for _, v := range vs {
			if !validValue(v) {
				return nil, fmt.Errorf("invalid header field value for %q", k)
			}
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, strings.TrimSpace(v)...)
			b = append(b, "\r\n"...)
		}
	}
	if req.ContentLength > 0 || methodWantsLength(method) {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, max(req.ContentLength, 0), 10)
		b = append(b, "\r\n"...)
	}
	return append(b, "\r\n"...), nil
}

// methodWantsLength: net/http sends "Content-Length: 0" for these.
func methodWantsLength(m string) bool {
	return m == http.MethodPost || m == http.MethodPut || m == http.MethodPatch
}

// appendBody reads the request's body (ContentLength bytes) after b and
// closes it.
func appendBody(b []byte, req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return b, nil
	}
	defer req.Body.Close()
	n := len(b)
	b = append(b, make([]byte, req.ContentLength)...)
	if _, err := io.ReadFull(req.Body, b[n:]); err != nil {
		return nil, fmt.Errorf("http: ContentLength=%d with Body length mismatch: %w", req.ContentLength, err)
	}
	return b, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// validToken: a header name or method, RFC 9110 token characters.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !tokenChar[s[i]] {
			return false
		}
	}
	return true
}

// tokenChar marks the bytes a token may hold: visible ASCII but the
// delimiters.
var tokenChar = func() (t [256]bool) {
	for c := '!'; c <= '~'; c++ {
		t[c] = !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
	}
	return t
}()

// validValue: no control characters other than tab.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// canonicalAddr is host:port, the port defaulting to 80: the URL's host
// as it is when it names a port.
func canonicalAddr(req *http.Request) string {
	if req.URL.Port() != "" {
		return req.URL.Host
	}
	return net.JoinHostPort(req.URL.Hostname(), "80")
}

// idleConn returns an idle connection to key that the server has not
// closed, or nil.
func (t *Transport) idleConn(key string) *pconn {
	for {
		t.mu.Lock()
		cs := t.idle[key]
		if len(cs) == 0 {
			t.mu.Unlock()
			return nil
		}
		c := cs[len(cs)-1]
		cs[len(cs)-1] = nil
		t.idle[key] = cs[:len(cs)-1]
		t.mu.Unlock()
		if time.Since(c.idleFrom) < idleTimeout && c.open() {
			return c
		}
		c.Close()
	}
}

// dialConn dials a connection to key by deadline (when not zero) as well
// as ctx (see connect), warning Logger of a connection that took long.
//
// The dial runs on a goroutine of its own, the caller waiting: a run's
// first round dials a connection per caller, thousands at once, and a
// dial is the deepest thing a call does (the socket calls, the poller's
// registration) — on the caller's stack it would double that stack for
// the rest of the run, and copy it, in every caller (docs/PERFORMANCE.md,
// stacks). A goroutine and a channel per new connection cost far less.
func (t *Transport) dialConn(ctx context.Context, deadline time.Time, key string) (*pconn, error) {
	done := make(chan dialed, 1)
	go func() {
		c, err := t.dialNow(ctx, deadline, key)
		done <- dialed{c, err}
	}()
	d := <-done
	return d.c, d.err
}

// dialed is a dial's outcome.
type dialed struct {
	c   *pconn
	err error
}

// dialNow is dialConn's dial.
func (t *Transport) dialNow(ctx context.Context, deadline time.Time, key string) (*pconn, error) {
	start := time.Now()
	nc, err := t.connect(ctx, deadline, key)
	if err != nil {
		return nil, err
	}
	if t.Logger != nil {
		if took := time.Since(start); took >= cmp.Or(t.slowDialAfter, slowDial) {
			resent, known := handshakeResent(nc)
			t.noteDial(key, took, resent || !known)
		}
	}
	return &pconn{Conn: nc, br: bufio.NewReaderSize(nc, readBufferSize), key: key}, nil
}

// slowDial is the time a dial may take before Logger hears of it: on
// loopback or a LAN a handshake takes well under a millisecond, and one
// the server's kernel dropped is sent again only after a second.
const slowDial = time.Second

// noteDial warns Logger of a dial to addr that took longer than
// slowDial, at most once a minute per address. dropped: its handshake was
// sent again (or that is not known), as when the server's listen backlog
// is full; otherwise the time went on this side, and the backlog is not
// the cause to name.
func (t *Transport) noteDial(addr string, took time.Duration, dropped bool) {
	if took < cmp.Or(t.slowDialAfter, slowDial) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	if last, ok := t.warned[addr]; ok && now.Sub(last) < time.Minute {
		t.mu.Unlock()
		return
	}
	if t.warned == nil {
		t.warned = map[string]time.Time{}
	}
	t.warned[addr] = now
	t.mu.Unlock()
	if !dropped {
		t.Logger.Warn("slow TCP connect: no handshake was sent again, so the time went on this side",
			"addr", addr, "took", took.Round(time.Millisecond),
			"hint", "this process waited for the CPU (a busy or throttled machine, or more concurrency than it has cores for); the server's backlog is not the cause")
		return
	}
	t.Logger.Warn("slow TCP connect: the server completed the handshake late",
		"addr", addr, "took", took.Round(time.Millisecond),
		"hint", "a server whose listen backlog is smaller than the connections opened at once drops the handshakes beyond it, and they are sent again after 1 s, 3 s, 7 s...: raise its backlog (uvicorn --backlog, net.core.somaxconn) or lower the concurrency")
}

// connect connects to key by deadline (when not zero) as well as ctx: a
// server that does not answer the handshake fails the attempt in its
// time, with errExpired. An IP address is dialled by dialSocket, a name
// by net.Dialer.
func (t *Transport) connect(ctx context.Context, deadline time.Time, key string) (net.Conn, error) {
	nc, ok, err := dialSocket(ctx, deadline, key)
	if !ok {
		if deadline.IsZero() {
			return t.dialer.DialContext(ctx, "tcp", key)
		}
		dctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		nc, err = t.dialer.DialContext(dctx, "tcp", key)
	}
	if err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)) {
		if cdl, ok := ctx.Deadline(); ok && !cdl.After(deadline) {
			<-ctx.Done() // the caller's deadline
			return nil, fmt.Errorf("%w (%w)", err, ctx.Err())
		} else if ctx.Err() == nil {
			return nil, fmt.Errorf("%w (%w)", err, errExpired)
		}
	}
	return nc, err
}

// put keeps c for the next request, or closes it when the pool is full.
func (t *Transport) put(c *pconn) {
	c.idleFrom = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*pconn{}
	}
	if cs := t.idle[c.key]; len(cs) < max(t.MaxIdlePerHost, 1) {
		t.idle[c.key] = append(cs, c)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	c.Close()
}

// CloseIdleConnections closes the idle connections, Fallback's too.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, cs := range idle {
		for _, c := range cs {
			c.Close()
		}
	}
	if ci, ok := t.Fallback.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// wireBuffers hold requests while they are written; one larger than
// maxPooledWire is left to the collector.
var wireBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

const maxPooledWire = 1 << 20

// longAgo is a deadline in the past: it interrupts a blocked read or write.
var longAgo = time.Unix(1, 0)

// exchange writes the request and reads the answer's head. When the
// context ends first, its error is returned.
func (t *Transport) exchange(ctx context.Context, deadline time.Time, c *pconn, req *http.Request, head []byte, payload [][]byte) (resp *http.Response, err error) {
	dl, ctxFirst := ctx.Deadline()
	if ctxFirst && !deadline.IsZero() && deadline.Before(dl) || !ctxFirst {
		dl, ctxFirst = deadline, false
	}
	defer func() {
		if err != nil {
			err = deadlineErr(ctx, ctxFirst, err)
		}
	}()
	if err := c.SetDeadline(dl); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(longAgo) })
	// One write of the head and the body, joined in a pooled buffer that
	// is free again as soon as it is written. (Not writev: besides costing
	// about the same, it is invisible to the race detector, which sees
	// socket writes order a server's reads only through write(2).)
	bp := wireBuffers.Get().(*[]byte)
	wire := append((*bp)[:0], head...)
	for _, p := range payload {
		wire = append(wire, p...)
	}
	_, err = c.Write(wire)
	if cap(wire) <= maxPooledWire {
		*bp = wire
		wireBuffers.Put(bp)
	}
	if err != nil {
		stop()
		return nil, err
	}
	// Wait for the answer here rather than inside http.ReadResponse: the
	// thousands of callers parked at once then use under a quarter of a
	// 16 KB stack, which the collector halves (docs/PERFORMANCE.md). An
	// answer that never starts fails as ReadResponse fails it.
	if _, err = c.br.Peek(1); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		stop()
		return nil, err
	}
	if resp = readCommonHead(c.br, req); resp == nil {
		if resp, err = readHead(c.br, req); err != nil {
			stop()
			return nil, err
		}
	}
	keep := !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols &&
		(resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0)
	resp.Body = &body{rc: resp.Body, t: t, c: c, ctx: ctx, ctxFirst: ctxFirst, stop: stop, keep: keep}
	return resp, nil
}

// readHead reads an answer's head that readCommonHead does not, by
// net/http's http.ReadResponse: informational answers (1xx but 101)
// precede the real one, and net/http allows five. Not inlined, nor is
// ReadResponse's depth on the stack of the common answer's caller.
//
//go:noinline
func readHead(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for informational := 0; ; informational++ {
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode > 199 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if informational == 5 {
			return nil, errors.New("too many 1xx informational responses")
		}
	}
}

// deadlineErr is the error of an exchange as its caller sees it: the
// context's error once the context has ended (waiting for that when the
// connection's deadline was the context's), errExpired when the
// exchange's own deadline passed.
func deadlineErr(ctx context.Context, ctxFirst bool, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if ctxFirst {
			<-ctx.Done()
		} else if ctx.Err() == nil {
			return errExpired
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// body is an answer's body; at its end the connection goes back to the
// pool, or is closed.
type body struct {
	rc       io.ReadCloser
	t        *Transport
	c        *pconn
	ctx      context.Context
	ctxFirst bool // the connection's deadline is the context's
	stop     func() bool
	keep     bool
	done     bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.release(true)
	} else if err != nil {
		b.release(false)
		err = deadlineErr(b.ctx, b.ctxFirst, err)
	}
	return n, err
}

func (b *body) Close() error {
	if !b.done {
		b.release(false)
	}
	return nil
}

// release ends the exchange: the connection is reused only when the body
// was read to its end, the server keeps it open and no cancellation has
// touched its deadline.
func (b *body) release(atEOF bool) {
	b.done = true
	if b.stop() && atEOF && b.keep && b.c.br.Buffered() == 0 {
		if b.c.SetDeadline(time.Time{}) == nil {
			b.t.put(b.c)
			return
		}
	}
	b.c.Close()
}
