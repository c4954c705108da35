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
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

func TestBackoff_Sequence(t *testing.T) {
	b := Policy{BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}.Backoff()
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next(0))
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("waits=%v, want %v ms", got, want)
		}
	}
	b.Reset()
	if got, want := b.Next(0), 10*time.Millisecond; got != want {
		t.Fatalf("after Reset Next()=%v, want %v", got, want)
	}

	b = Policy{BaseDelay: 10 * time.Millisecond, MaxDelay: 3 * time.Second}.Backoff()
	if got, want := b.Next(2*time.Second), 2*time.Second; got != want {
		t.Fatalf("Next(Retry-After 2s)=%v, want %v", got, want)
	}
	if got, want := b.Next(time.Minute), 3*time.Second; got != want {
		t.Fatalf("Next(Retry-After 1m)=%v, want the cap %v", got, want)
	}
}

func TestBackoff_Jitter(t *testing.T) {
	for _, tt := range []struct {
		jitter, draw float64
		want         time.Duration
	}{
		{0.5, 0, 100 * time.Millisecond},       // no reduction
		{0.5, 0.5, 75 * time.Millisecond},      // 100 - 0.5*0.5*100
		{0.5, 0.999, 50050 * time.Microsecond}, // just above the floor of 50
		{1, 0.25, 75 * time.Millisecond},
		{0, 0.9, 100 * time.Millisecond},
	} {
		b := Policy{BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: tt.jitter}.Backoff()
		b.rand = func() float64 { return tt.draw }
		if got := b.Next(0); got != tt.want {
			t.Errorf("jitter %v draw %v: Next()=%v, want %v", tt.jitter, tt.draw, got, tt.want)
		}
	}
}

func TestPolicy_Normalized(t *testing.T) {
	p := Policy{Retries: -2}.normalized()
	if p.Retries != 0 || p.BaseDelay != DefaultBaseDelay || p.MaxDelay != DefaultMaxDelay {
		t.Fatalf("normalized zero policy = %+v", p)
	}
	p = Policy{BaseDelay: time.Second, MaxDelay: time.Millisecond, Jitter: 3}.normalized()
	if p.MaxDelay != time.Second || p.Jitter != 1 {
		t.Fatalf("normalized = %+v, want MaxDelay 1s and Jitter 1", p)
	}
}

// fast retries within milliseconds.
func fast(retries int) Policy {
	return Policy{Retries: retries, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}
}

// script answers the i-th request (from 0) with answers[i] (the last one
// repeats) and counts requests.
func script(t *testing.T, answers ...http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		answers[min(i, len(answers)-1)](w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		fmt.Fprint(w, body)
	}
}

// reset drops the connection without an answer.
func reset(w http.ResponseWriter, r *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func TestDo_RetriesTransient(t *testing.T) {
	srv, n := script(t,
		answer(500, `{"error":{"message":"boom"}}`),
		answer(429, `slow down`),
		reset,
		answer(503, ``),
		answer(200, `ok`))
	c := New(Options{Retry: fast(4)})
	// POST: net/http itself resends an idempotent GET once on a dropped
	// reused connection, which would blur the count.
	resp, attempts, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Body: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(resp.Body), "ok"; got != want {
		t.Fatalf("body=%q, want %q", got, want)
	}
	if attempts != 5 || n.Load() != 5 {
		t.Fatalf("attempts=%d requests=%d, want 5 and 5", attempts, n.Load())
	}
}

func TestDo_GivesUpAfterRetries(t *testing.T) {
	srv, n := script(t, answer(502, `<html>bad gateway</html>`))
	_, attempts, err := New(Options{Retry: fast(2)}).Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Body: []byte(`{}`)})
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != 502 || !strings.Contains(err.Error(), `"<html>bad gateway</html>"`) {
		t.Fatalf("Do()=%v, want a 502 StatusError quoting the body", err)
	}
	if attempts != 3 || n.Load() != 3 {
		t.Fatalf("attempts=%d requests=%d, want 3 (one try and 2 retries)", attempts, n.Load())
	}
	// Retries 0: one attempt.
	_, attempts, _ = New(Options{}).Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	if attempts != 1 {
		t.Fatalf("zero policy made %d attempts, want 1", attempts)
	}
}

func TestDo_BadRequestNotRetried(t *testing.T) {
	for _, code := range []int{400, 401, 404, 422, 501} {
		srv, n := script(t, answer(code, `{"detail":"nope"}`))
		_, attempts, err := New(Options{Retry: fast(3)}).Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
		if err == nil || attempts != 1 || n.Load() != 1 {
			t.Fatalf("%d: err=%v after %d attempts, want one attempt", code, err, attempts)
		}
		if !strings.HasSuffix(err.Error(), ": nope") {
			t.Fatalf("%d: error %q does not end with the detail", code, err)
		}
	}
}

func TestDo_RetryAfterObeyed(t *testing.T) {
	srv, n := script(t,
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
		},
		answer(200, "ok"))
	c := New(Options{Retry: Policy{Retries: 1, BaseDelay: time.Millisecond, MaxDelay: 3 * time.Second}})
	// The wait is read off a fake clock: measured on the wall clock, a
	// loaded machine stretched it past any bound above the 1s.
	clk := &fakeClock{t: time.Unix(0, 0)}
	c.now, c.sleep = clk.now, clk.sleep
	if _, _, err := c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL}); err != nil {
		t.Fatal(err)
	}
	if len(clk.waits) != 1 || clk.waits[0] != time.Second {
		t.Fatalf("waits=%v, want [1s], the wait the server asked for", clk.waits)
	}
	if n.Load() != 2 {
		t.Fatalf("%d requests, want 2", n.Load())
	}
}

// fakeClock advances only when the client sleeps.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	waits []time.Duration
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
	f.waits = append(f.waits, d)
	return ctx.Err()
}

func TestDo_BudgetExhausted(t *testing.T) {
	srv, n := script(t, answer(500, "down"))
	// Seconds on a fake clock: each attempt's real timeout is what is left
	// of the budget (at least 5s), so a loaded machine cannot time one out.
	c := New(Options{Retry: Policy{Retries: 100, Budget: 55 * time.Second, BaseDelay: 10 * time.Second, MaxDelay: 10 * time.Second}})
	clk := &fakeClock{t: time.Unix(0, 0)}
	c.now, c.sleep = clk.now, clk.sleep
	_, attempts, err := c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	// Attempts at 0, 10, 20, 30, 40 and 50s; a sixth wait would end at
	// 60s, past the budget.
	if err == nil || attempts != 6 || n.Load() != 6 || len(clk.waits) != 5 {
		t.Fatalf("err=%v attempts=%d requests=%d waits=%v, want 6 attempts and 5 waits", err, attempts, n.Load(), clk.waits)
	}
}

func TestDo_RetryAfterRecorded(t *testing.T) {
	srv, _ := script(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(429)
	})
	c := New(Options{Retry: Policy{Retries: 2, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}})
	clk := &fakeClock{t: time.Unix(0, 0)}
	c.now, c.sleep = clk.now, clk.sleep
	c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	if len(clk.waits) != 2 || clk.waits[0] != 2*time.Second || clk.waits[1] != 2*time.Second {
		t.Fatalf("waits=%v, want [2s 2s]", clk.waits)
	}
}

func TestDo_Timeout(t *testing.T) {
	release := make(chan struct{})
	srv, n := script(t, func(w http.ResponseWriter, r *http.Request) { <-release })
	defer close(release)
	_, attempts, err := New(Options{Retry: fast(1), Timeout: 250 * time.Millisecond}).Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	var te *TimeoutError
	if !errors.As(err, &te) || err.Error() != "no answer within 250ms" {
		t.Fatalf("Do()=%v, want a TimeoutError", err)
	}
	if attempts != 2 || n.Load() != 2 {
		t.Fatalf("attempts=%d requests=%d, want 2", attempts, n.Load())
	}
}

func TestDo_ContextEndsWait(t *testing.T) {
	srv, _ := script(t, answer(500, "down"))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := New(Options{Retry: Policy{Retries: 5, BaseDelay: time.Minute}}).Do(ctx, &Request{Method: "GET", URL: srv.URL})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last error") || time.Since(start) > 5*time.Second {
		t.Fatalf("Do()=%v after %v, want the context's deadline soon", err, time.Since(start))
	}
	if IsTransient(err) {
		t.Fatal("a caller's deadline counts as transient")
	}
}

func TestDo_BodyCap(t *testing.T) {
	srv, n := script(t, answer(200, strings.Repeat("x", 100)))
	c := New(Options{MaxBody: 10, Retry: fast(2)})
	_, attempts, err := c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	if !errors.Is(err, ErrTooLarge) || attempts != 1 {
		t.Fatalf("Do()=%v after %d attempts, want ErrTooLarge after 1", err, attempts)
	}
	if !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Fatalf("error %q does not give the cap", err)
	}
	// RetryGarbage retries it.
	_, attempts, _ = c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL, RetryGarbage: true})
	if attempts != 3 || n.Load() != 4 {
		t.Fatalf("RetryGarbage: attempts=%d requests=%d, want 3 and 4", attempts, n.Load())
	}
	// An error answer is cut at the cap.
	srv, _ = script(t, answer(400, strings.Repeat("y", 100)))
	_, _, err = c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL})
	var se *StatusError
	if !errors.As(err, &se) || len(se.Body) != 10 {
		t.Fatalf("Do()=%v, want a StatusError with a 10-byte body", err)
	}
}

func TestDo_AcceptRejects(t *testing.T) {
	srv, n := script(t, answer(200, "half"), answer(200, "whole"))
	accept := func(r *Response) error {
		if string(r.Body) != "whole" {
			return &GarbageError{Body: string(r.Body)}
		}
		return nil
	}
	c := New(Options{Retry: fast(3)})
	_, _, err := c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL, Accept: accept})
	var ge *GarbageError
	if !errors.As(err, &ge) || n.Load() != 1 {
		t.Fatalf("Do()=%v after %d requests, want the rejection, not retried", err, n.Load())
	}
	resp, attempts, err := c.Do(context.Background(), &Request{Method: "GET", URL: srv.URL, Accept: accept, RetryGarbage: true})
	if err != nil || string(resp.Body) != "whole" || attempts != 1 {
		t.Fatalf("Do()=%v, %v after %d attempts", resp, err, attempts)
	}
}

func TestDo_HeadersAndAuth(t *testing.T) {
	var got http.Header
	srv, _ := script(t, func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() })
	c := New(Options{BearerToken: "sk-1"})
	_, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Body: []byte(`{}`), Header: http.Header{"Accept": {"text/plain"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer sk-1" || got.Get("Content-Type") != "application/json" || got.Get("Accept") != "text/plain" {
		t.Fatalf("headers %v", got)
	}
}

func TestConnectionRefusedIsTransient(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	_, attempts, err := New(Options{Retry: fast(2)}).Do(context.Background(), &Request{Method: "GET", URL: url})
	if err == nil || attempts != 3 || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Do()=%v after %d attempts, want connection refused after 3", err, attempts)
	}
}

func TestParseErrorBody(t *testing.T) {
	for _, tt := range []struct {
		body string
		want ServerError
	}{
		{`{"error":{"message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","code":404}}`,
			ServerError{Message: "The model `x` does not exist.", Type: "NotFoundError", OpenAI: true}},
		{`{"object":"error","message":"cannot be found","type":"InvalidUserInput","code":400}`,
			ServerError{Message: "cannot be found", Type: "InvalidUserInput", OpenAI: true}},
		{`{"error":"Unauthorized"}`, ServerError{Message: "Unauthorized"}},
		{`{"detail":"Not Found"}`, ServerError{Message: "Not Found"}},
		{`{"detail":[{"loc":["body","id"],"msg":"field required"}]}`, ServerError{Message: `["body","id"]: field required`}},
		{`engine dead`, ServerError{Message: `"engine dead"`}},
		{`<html>` + strings.Repeat("z", 200), ServerError{Message: `"<html>` + strings.Repeat("z", 114) + `"...`}},
		{`{"status":"bad"}`, ServerError{Message: `"{\"status\":\"bad\"}"`}},
		{"  \n", ServerError{Message: "empty body"}},
		{``, ServerError{Message: "empty body"}},
	} {
		if got := ParseErrorBody([]byte(tt.body)); got != tt.want {
			t.Errorf("ParseErrorBody(%.40q)=%+v, want %+v", tt.body, got, tt.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tt := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {" 0 ", 0}, {"-4", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := ParseRetryAfter(tt.v, now); got != tt.want {
			t.Errorf("ParseRetryAfter(%q)=%v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestIsTransient(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&StatusError{StatusCode: 429}, true},
		{&StatusError{StatusCode: 500}, true},
		{&StatusError{StatusCode: 501}, false},
		{&StatusError{StatusCode: 503}, true},
		{&StatusError{StatusCode: 400}, false},
		{fmt.Errorf("wrapped: %w", &TimeoutError{}), true},
		{&GarbageError{}, false},
		{context.Canceled, false},
		{context.DeadlineExceeded, false},
		{errors.New("other"), false},
		{&url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)}, false},
		{&url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, true},
		{&url.Error{Op: "Post", URL: "http://x", Err: io.ErrUnexpectedEOF}, true},
		// net/http's errServerClosedIdle, which it retries only for idempotent methods.
		{&url.Error{Op: "Post", URL: "http://x", Err: errors.New("http: server closed idle connection")}, true},
	} {
		if got := IsTransient(tt.err); got != tt.want {
			t.Errorf("IsTransient(%v)=%v, want %v", tt.err, got, tt.want)
		}
	}
}

// FuzzParseErrorBody: any body gives a message, never a panic, and a
// short one: error messages quote, they do not copy.
func FuzzParseErrorBody(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"m","type":"t"}}`, `{"error":"e"}`, `{"detail":[{"msg":"x"}]}`, `{"detail":"d"}`, `plain`, ``} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		se := ParseErrorBody([]byte(body))
		if se.Message == "" {
			t.Fatalf("no message for %q", body)
		}
		if !strings.HasPrefix(strings.TrimSpace(body), "{") && len(se.Message) > 4*160 {
			t.Fatalf("message of %d bytes for a non-JSON body", len(se.Message))
		}
	})
}

func TestPolicy_Validate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		p    Policy
		want string
	}{
		{Policy{Retries: -1}, "retries: is -1; need 0 or more"},
		{Policy{Budget: -time.Second}, "budget: is -1s"},
		{Policy{BaseDelay: -1}, "base_delay:"},
		{Policy{MaxDelay: -1}, "max_delay:"},
		{Policy{Jitter: 1.5}, "jitter: is 1.5; need 0 to 1"},
	} {
		if err := tt.p.Validate(); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("Validate(%+v)=%v, want %q...", tt.p, err, tt.want)
		}
	}
}

func TestNewHTTPClient_PoolFollowsConcurrency(t *testing.T) {
	for _, tt := range []struct{ concurrency, perHost int }{{64, 64}, {1, 2}, {500, 500}} {
		tr := NewHTTPClient(tt.concurrency, nil).Transport.(*http.Transport)
		if tr.MaxIdleConnsPerHost != tt.perHost || tr.MaxIdleConns < tt.perHost || tr.DisableKeepAlives {
			t.Errorf("NewHTTPClient(%d): idle per host %d, idle %d, keep-alive off %v; want %d per host with keep-alive",
				tt.concurrency, tr.MaxIdleConnsPerHost, tr.MaxIdleConns, tr.DisableKeepAlives, tt.perHost)
		}
		if tr.Proxy == nil || !tr.DisableCompression || !tr.ForceAttemptHTTP2 || tr.TLSHandshakeTimeout == 0 {
			t.Errorf("NewHTTPClient(%d): proxy function set %v, compression off %v, HTTP/2 for TLS %v, TLS handshake timeout %v; want all set",
				tt.concurrency, tr.Proxy != nil, tr.DisableCompression, tr.ForceAttemptHTTP2, tr.TLSHandshakeTimeout)
		}
	}
	if DefaultHTTPClient() != DefaultHTTPClient() {
		t.Fatal("DefaultHTTPClient() is not shared")
	}
}

// TestSmallReadBuffer: with NewHTTPClient's 1 KB read buffer, answers
// under, across and far over it, with or without a length, and a header
// line longer than the buffer, are read whole, each connection kept.
func TestSmallReadBuffer(t *testing.T) {
	if tr := NewHTTPClient(8, nil).Transport.(*http.Transport); tr.ReadBufferSize != readBufferSize || tr.WriteBufferSize != 0 {
		t.Fatalf("read buffer %d, write buffer %d; want %d and Go's default", tr.ReadBufferSize, tr.WriteBufferSize, readBufferSize)
	}
	srv, conns := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var size int
		var chunked, longHeader bool
		fmt.Sscanf(r.URL.Query().Get("size"), "%d", &size)
		chunked, longHeader = r.URL.Query().Has("chunked"), r.URL.Query().Has("long")
		if longHeader {
			w.Header().Set("X-Long", strings.Repeat("h", 3*readBufferSize))
		}
		body := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
		if !chunked {
			w.Header().Set("Content-Length", fmt.Sprint(size))
			w.Write(body)
			return
		}
		for len(body) > 0 { // flushed in pieces: no Content-Length
			n := min(len(body), 700)
			w.Write(body[:n])
			w.(http.Flusher).Flush()
			body = body[n:]
		}
	}))
	c := New(Options{HTTPClient: NewHTTPClient(2, nil)})
	for _, size := range []int{0, 10, 900, 1024, 1500, 4096, 5000, 100 << 10} {
		for _, q := range []string{"", "&chunked", "&long", "&chunked&long"} {
			resp, _, err := c.Do(context.Background(), &Request{Method: http.MethodGet, URL: fmt.Sprintf("%s/?size=%d%s", srv.URL, size, q)})
			if err != nil {
				t.Fatalf("size %d%s: %v", size, q, err)
			}
			want := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
			if !bytes.Equal(resp.Body, want) {
				t.Fatalf("size %d%s: read %d bytes, not the %d sent", size, q, len(resp.Body), size)
			}
			if strings.Contains(q, "long") && len(resp.Header.Get("X-Long")) != 3*readBufferSize {
				t.Fatalf("size %d%s: long header read as %d bytes", size, q, len(resp.Header.Get("X-Long")))
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for sequential requests; want 1", n)
	}
}

// TestConnectionsReused: answers are read whole, so sequential requests
// share one kept-alive connection.
func TestConnectionsReused(t *testing.T) {
	srv, conns := countConns(t, answer(200, `{"ok":true}`))
	c := New(Options{HTTPClient: NewHTTPClient(4, nil)})
	for range 20 {
		if _, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Fatalf("%d connections for 20 sequential requests, want 1", got)
	}
}

// TestEncodePerAttempt: a request with Encode is encoded for each
// attempt, its body sent whole each time; an Encode error ends Do before
// the attempt, counted as not made.
func TestEncodePerAttempt(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv, _ := countConns(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		n := len(got)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{}`))
	}))
	c := New(Options{Retry: Policy{Retries: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}})
	encoded := 0
	encode := func() ([]byte, error) {
		encoded++
		return []byte(fmt.Sprintf(`{"n":%d}`, encoded)), nil
	}
	if _, attempts, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Encode: encode}); err != nil || attempts != 2 {
		t.Fatalf("Do: %d attempts, %v; want 2, nil", attempts, err)
	}
	if want := []string{`{"n":1}`, `{"n":2}`}; !reflect.DeepEqual(got, want) || encoded != 2 {
		t.Fatalf("server read %q after %d encodings; want %q after 2", got, encoded, want)
	}
	bad := errors.New("cannot encode")
	_, attempts, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Encode: func() ([]byte, error) { return nil, bad }})
	if !errors.Is(err, bad) || attempts != 0 || len(got) != 2 {
		t.Fatalf("Do with a failing Encode: %d attempts, %v, %d requests; want 0, %v, none more", attempts, err, len(got)-2, bad)
	}
	if _, err := c.Send(context.Background(), &Request{Method: "POST", URL: srv.URL, Encode: func() ([]byte, error) { return nil, bad }}); !errors.Is(err, bad) {
		t.Fatalf("Send with a failing Encode: %v; want %v", err, bad)
	}
}

// TestEncodeBodyReleased: the body of a request with Encode is let go
// once written (net/http's WroteRequest), not after a failed write, and
// GetBody encodes it again.
func TestEncodeBodyReleased(t *testing.T) {
	c := New(Options{})
	r := &Request{Method: "POST", URL: "http://127.0.0.1:8000/", Encode: func() ([]byte, error) { return []byte(`{"a":1}`), nil }}
	for _, wrote := range []error{errors.New("broken pipe"), nil} {
		hreq, err := c.newRequest(context.Background(), r, []byte(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		if hreq.ContentLength != 7 || hreq.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("length %d, content type %q; want 7, JSON", hreq.ContentLength, hreq.Header.Get("Content-Type"))
		}
		trace := httptrace.ContextClientTrace(hreq.Context())
		if trace == nil || trace.WroteRequest == nil {
			t.Fatal("no WroteRequest hook")
		}
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: wrote})
		want := ""
		if wrote != nil {
			want = `{"a":1}`
		}
		if b, _ := io.ReadAll(hreq.Body); string(b) != want {
			t.Fatalf("after WroteRequest (error %v) the body reads %q; want %q", wrote, b, want)
		}
	}
	hreq, err := c.newRequest(context.Background(), r, []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, err := hreq.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(body); string(b) != `{"a":1}` {
		t.Fatalf("GetBody reads %q; want the body encoded again", b)
	}
	if plain, _ := c.newRequest(context.Background(), &Request{Method: "POST", URL: r.URL, Body: []byte(`{}`)}, []byte(`{}`)); httptrace.ContextClientTrace(plain.Context()) != nil {
		t.Fatal("a request with Body (no Encode) is traced")
	}
}

// countConns serves h until the test ends, counting the connections
// opened to it.
func countConns(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	conns := new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns
}

// TestReadBody: an answer is read whole whether its length is announced
// or not, up to one byte past the cap, and a body longer than it
// announced is read on (as io.ReadAll reads it).
func TestReadBody(t *testing.T) {
	body := strings.Repeat("x", 1500)
	for _, tt := range []struct {
		name   string
		length int64 // announced
		max    int64
		want   int
	}{
		{"announced", 1500, 1 << 20, 1500},
		{"chunked", -1, 1 << 20, 1500},
		{"over the cap, announced", 1500, 1000, 1001},
		{"over the cap, chunked", -1, 1000, 1001},
		{"more than announced", 1000, 1 << 20, 1500},
		{"more than announced, over the cap", 1000, 1200, 1201},
	} {
		for _, half := range []bool{false, true} {
			var r io.Reader = strings.NewReader(body)
			if half {
				r = iotest.HalfReader(r)
			}
			got, err := readBody(&http.Response{ContentLength: tt.length, Body: io.NopCloser(r)}, tt.max)
			if err != nil || len(got) != tt.want || strings.Trim(string(got), "x") != "" {
				t.Errorf("%s (half reads %v): %d bytes (%v), want %d", tt.name, half, len(got), err, tt.want)
			}
		}
	}
	boom := errors.New("boom")
	_, err := readBody(&http.Response{ContentLength: 10, Body: io.NopCloser(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)))}, 100)
	if !errors.Is(err, boom) {
		t.Fatalf("a body cut short: error %v, want boom", err)
	}
}

// TestSlowDialWarned: a connect that took the threshold or longer is
// warned of once a minute per address, naming it; a fast one is not.
func TestSlowDialWarned(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	var log bytes.Buffer
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &slowDialer{logger: slog.New(slog.NewTextHandler(&log, nil)), after: time.Second,
		now: func() time.Time { clock = clock.Add(2 * time.Second); return clock }} // every dial "takes" 2s
	c, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if got := log.String(); strings.Count(got, "slow TCP connect") != 1 || !strings.Contains(got, "addr="+addr) || !strings.Contains(got, "took=2s") {
		t.Fatalf("log %q: want one slow-connect warning naming %s and 2s", got, addr)
	}
	d.note(addr, 5*time.Second)             // the same address within the minute
	d.note("127.0.0.1:1", time.Millisecond) // fast
	if n := strings.Count(log.String(), "slow TCP connect"); n != 1 {
		t.Fatalf("%d warnings after a second slow dial within the minute and a fast one, want 1", n)
	}
	d.note("127.0.0.1:2", time.Second)
	if n := strings.Count(log.String(), "slow TCP connect"); n != 2 {
		t.Fatalf("%d warnings after a slow dial to another address, want 2", n)
	}
	clock = clock.Add(time.Minute)
	d.note(addr, time.Second)
	if n := strings.Count(log.String(), "slow TCP connect"); n != 3 {
		t.Fatalf("%d warnings after a slow dial to the first address a minute later, want 3", n)
	}
}

// TestNewRequest: a request carries JSON's Accept, its Content-Type when
// it has a body, the bearer token and its own headers, which override
// them; a bad method or URL is net/http's error.
func TestNewRequest(t *testing.T) {
	c := New(Options{BearerToken: "secret"})
	u := "http://127.0.0.1:8000/v1/chat/completions"
	r, err := c.newRequest(context.Background(), &Request{Method: "POST", URL: u, Body: []byte(`{}`), Header: http.Header{"Accept": {"text/plain"}, "X-A": {"1"}}}, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Accept": {"text/plain"}, "Content-Type": {"application/json"}, "Authorization": {"Bearer secret"}, "X-A": {"1"}}
	if !reflect.DeepEqual(r.Header, want) || r.ContentLength != 2 || r.GetBody == nil {
		t.Fatalf("header %v, length %d, GetBody set %v; want %v, 2, set", r.Header, r.ContentLength, r.GetBody != nil, want)
	}
	r, err = New(Options{}).newRequest(context.Background(), &Request{Method: "GET", URL: u}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (http.Header{"Accept": {"application/json"}}); !reflect.DeepEqual(r.Header, want) || r.Body != nil {
		t.Fatalf("GET: header %v, body %v; want %v and none", r.Header, r.Body, want)
	}
	for _, r := range []*Request{{Method: "BAD METHOD", URL: u}, {Method: "GET", URL: "http://[::1"}} {
		_, err := c.newRequest(context.Background(), r, nil)
		_, want := http.NewRequest(r.Method, r.URL, nil)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Fatalf("%s %s: error %v, want %v", r.Method, r.URL, err, want)
		}
	}
}
