package httpx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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
		own := NewHTTPClient(tt.concurrency, nil).Transport.(*Transport)
		tr := own.Fallback.(*http.Transport)
		if own.MaxIdlePerHost != tt.perHost || tr.MaxIdleConnsPerHost != tt.perHost || tr.MaxIdleConns < tt.perHost || tr.DisableKeepAlives {
			t.Errorf("NewHTTPClient(%d): idle per host %d (fallback %d), idle %d, keep-alive off %v; want %d per host with keep-alive",
				tt.concurrency, own.MaxIdlePerHost, tr.MaxIdleConnsPerHost, tr.MaxIdleConns, tr.DisableKeepAlives, tt.perHost)
		}
		if own.Proxy == nil {
			t.Errorf("NewHTTPClient(%d): no proxy function: a proxy from the environment would be bypassed", tt.concurrency)
		}
	}
	if DefaultHTTPClient() != DefaultHTTPClient() {
		t.Fatal("DefaultHTTPClient() is not shared")
	}
}

// TestConnectionsReused: answers are read whole, so sequential requests
// share one kept-alive connection.
func TestConnectionsReused(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(answer(200, `{"ok":true}`))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
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

// TestReadUpToMatchesReadAll: readUpTo reads what
// io.ReadAll(io.LimitReader(r, limit)) reads, with the same error, for
// bodies shorter, as long as and longer than the limit, read whole, a
// byte at a time or ending in an error.
func TestReadUpToMatchesReadAll(t *testing.T) {
	boom := errors.New("boom")
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+eof": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
		"error":    func(s string) io.Reader { return io.MultiReader(strings.NewReader(s), iotest.ErrReader(boom)) },
	}
	for name, r := range readers {
		for _, size := range []int{0, 1, 511, 512, 513, 1500, 4000} {
			for _, limit := range []int64{0, 1, 10, 512, 513, 1501, 1 << 20} {
				body := strings.Repeat("x", size)
				got, gerr := readUpTo(r(body), limit)
				want, werr := io.ReadAll(io.LimitReader(r(body), limit))
				if string(got) != string(want) || gerr != werr {
					t.Errorf("%s, %d bytes, limit %d: %d bytes (%v), want %d (%v)", name, size, limit, len(got), gerr, len(want), werr)
				}
			}
		}
	}
}

// TestNewRequestAsNetHTTP: a Client's HTTP request — its URL parsed once
// per method and URL, its header map shared when the request has no
// headers of its own — is what http.NewRequestWithContext and the
// client's headers make of it, the first time and the next, for more
// URLs than the client keeps; a bad method or URL is net/http's error.
func TestNewRequestAsNetHTTP(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	urls := []string{
		"http://127.0.0.1:8000/v1/chat/completions",
		"http://localhost:/v1/models?x=1&y=%20",
		"http://[::1]:9/a%2Fb/c",
		"https://user:pw@example.invalid/v1#frag",
	}
	for i := range maxTargets + 4 {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:8000/v1/models/m%d", i))
	}
	for _, token := range []string{"", "secret"} {
		c := New(Options{BearerToken: token})
		for _, u := range urls {
			for _, r := range []*Request{
				{Method: "GET", URL: u},
				{Method: "POST", URL: u, Body: []byte(`{}`)},
				{Method: "POST", URL: u, Parts: [][]byte{}},
				{Method: "POST", URL: u, Parts: [][]byte{[]byte(`{`), []byte(`}`)}, Header: http.Header{"X-A": {"1"}, "Accept": {"text/plain"}}},
			} {
				for range 2 { // parsed, then kept (or not: past maxTargets)
					got, err := c.newRequest(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					want, _ := http.NewRequestWithContext(ctx, r.Method, r.URL, nil)
					if r.Body != nil || r.Parts != nil {
						want.Header["Content-Type"] = []string{"application/json"}
					}
					want.Header["Accept"] = []string{"application/json"}
					if token != "" {
						want.Header["Authorization"] = []string{"Bearer " + token}
					}
					for k, v := range r.Header {
						want.Header[k] = v
					}
					g := fmt.Sprintf("%s %s %s %s %d.%d %v", got.Method, got.URL, got.Host, got.Proto, got.ProtoMajor, got.ProtoMinor, got.Header)
					w := fmt.Sprintf("%s %s %s %s %d.%d %v", want.Method, want.URL, want.Host, want.Proto, want.ProtoMajor, want.ProtoMinor, want.Header)
					if g != w || !reflect.DeepEqual(got.URL, want.URL) || got.Context() != ctx {
						t.Fatalf("%s %s:\n got %s\nwant %s", r.Method, u, g, w)
					}
					got.URL.Path = "/changed" // the next request's URL is its own
				}
			}
		}
	}
	c := New(Options{})
	for _, r := range []*Request{{Method: "BAD METHOD", URL: urls[0]}, {Method: "GET", URL: "http://[::1"}} {
		_, err := c.newRequest(ctx, r)
		_, want := http.NewRequestWithContext(ctx, r.Method, r.URL, nil)
		if err == nil || want == nil || err.Error() != want.Error() {
			t.Fatalf("%s %s: error %v, want %v", r.Method, r.URL, err, want)
		}
	}
}
