package httpx

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seen is a request as a server read it.
type seen struct {
	Method, URI, Host string
	Header            http.Header
	ContentLength     int64
	Body              string
}

// recorder is an httptest server that keeps the requests it reads.
func recorder(t *testing.T) (*httptest.Server, func() []seen) {
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		h.Del("User-Agent")
		h.Del("Accept-Encoding") // net/http asks for gzip; Transport does not
		mu.Lock()
		got = append(got, seen{r.Method, r.RequestURI, r.Host, h, r.ContentLength, string(b)})
		mu.Unlock()
		w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []seen { mu.Lock(); defer mu.Unlock(); return append([]seen(nil), got...) }
}

// TestTransportSendsWhatNetHTTPSends: the server reads the same request,
// method, path, query, host, headers, length and body, from Transport as
// from net/http's transport.
func TestTransportSendsWhatNetHTTPSends(t *testing.T) {
	srv, got := recorder(t)
	ours := &http.Client{Transport: &Transport{MaxIdlePerHost: 2, Fallback: failTransport{t}}}
	theirs := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	body := strings.Repeat(`{"role":"user","content":"é <&> \u2028"}`, 500) // several TCP segments
	cases := []struct {
		method, path string
		body         *string
		header       http.Header
	}{
		{"POST", "/v1/chat/completions", &body, http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer k"}}},
		{"POST", "/v1/load_lora_adapter?x=1&y=%20", new(string), nil},
		{"GET", "/v1/models", nil, http.Header{"Accept": {"application/json"}, "X-Two": {"a", "b"}}},
		{"DELETE", "/v1/jobs/a%2Fb", nil, nil},
		{"PUT", "/p", &body, http.Header{"Host": {"ignored"}}},
	}
	for i, c := range cases {
		for _, hc := range []*http.Client{ours, theirs} {
			var rd io.Reader
			if c.body != nil {
				rd = bytes.NewReader([]byte(*c.body))
			}
			req, err := http.NewRequest(c.method, srv.URL+c.path, rd)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.header {
				req.Header[k] = v
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", c.method, c.path, err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
				t.Fatalf("%s %s: answer %q, want ok", c.method, c.path, b)
			}
			resp.Body.Close()
		}
		g := got()
		if len(g) != 2*(i+1) {
			t.Fatalf("%s %s: server read %d requests, want %d", c.method, c.path, len(g), 2*(i+1))
		}
		g = g[2*i:]
		if !reflect.DeepEqual(g[0], g[1]) {
			t.Errorf("%s %s: Transport sent\n%+v\nnet/http sent\n%+v", c.method, c.path, g[0], g[1])
		}
	}
}

// failTransport fails the test when a request falls back to it.
type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("%s %s went to the fallback transport", r.Method, r.URL)
	return nil, errors.New("fallback")
}

// rawServer accepts loopback connections and serves each with handle;
// it returns the address and the count of connections accepted.
func rawServer(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c, bufio.NewReader(c))
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

// readRequest reads one request and its body; false at the end of the
// connection.
func readRequest(br *bufio.Reader) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, req.Body)
	return true
}

func post(t *testing.T, hc *http.Client, u string) (string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", u+"/x", bytes.NewReader([]byte(`{}`)))
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestTransportReplacesClosedIdleConnections: a server that closes a
// kept-alive connection after two answers (as uvicorn does after its
// keep-alive timeout) costs no failed request: the closed connection is
// noticed before anything is written to it.
func TestTransportReplacesClosedIdleConnections(t *testing.T) {
	closed := make(chan struct{}, 10)
	addr, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for range 2 {
			if !readRequest(br) {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		c.Close()
		closed <- struct{}{}
	})
	hc := NewHTTPClient(4, nil)
	for i := range 6 {
		if i > 0 && i%2 == 0 {
			<-closed
		}
		if got, err := post(t, hc, addr); err != nil || got != "ok" {
			t.Fatalf("request %d: %q, %v; want ok", i+1, got, err)
		}
	}
	if got := conns.Load(); got != 3 {
		t.Fatalf("%d connections for 6 requests, 2 per connection; want 3", got)
	}
}

// TestTransportAnswerForms: chunked answers, answers that close the
// connection, answers read to the end of the connection and informational
// answers before the real one are all read whole; only connections whose
// answer was complete and kept them open are used again.
func TestTransportAnswerForms(t *testing.T) {
	for _, tt := range []struct {
		name, answer string
		wantConns    int64
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 1},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", 1},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\nX-Sum: 1\r\n\r\n", 1},
		{"100 continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 1},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", 3},
		{"to end of connection", "HTTP/1.0 200 OK\r\n\r\nhello", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				for readRequest(br) {
					io.WriteString(c, tt.answer)
					if strings.Contains(tt.answer, "close") || strings.HasPrefix(tt.answer, "HTTP/1.0") {
						return
					}
				}
			})
			hc := NewHTTPClient(4, nil)
			for i := range 3 {
				if got, err := post(t, hc, addr); err != nil || got != "hello" {
					t.Fatalf("request %d: %q, %v; want hello", i+1, got, err)
				}
			}
			if got := conns.Load(); got != tt.wantConns {
				t.Fatalf("%d connections for 3 requests, want %d", got, tt.wantConns)
			}
		})
	}
}

// TestTransportNoAnswer: a server that closes the connection without
// answering fails the request as net/http's ReadResponse fails it, with
// io.ErrUnexpectedEOF (transient, so retried), though Transport waits for
// the answer's first byte itself.
func TestTransportNoAnswer(t *testing.T) {
	addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) { readRequest(br) })
	tr := &Transport{MaxIdlePerHost: 1}
	req, _ := http.NewRequest("POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
	resp, err := tr.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("no error for a connection closed without an answer")
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
	}
	_, want := http.ReadResponse(bufio.NewReader(strings.NewReader("")), req)
	if err.Error() != want.Error() {
		t.Fatalf("error %q, want ReadResponse's %q", err, want)
	}
}

// TestTransportContextEnds: a server that never answers is left when the
// request's context ends, with the context's error, and through Client
// as a TimeoutError.
func TestTransportContextEnds(t *testing.T) {
	addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.Copy(io.Discard, br) // until the client goes
	})
	hc := NewHTTPClient(4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
	if _, err := hc.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: err %v, want context.DeadlineExceeded", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	req, _ = http.NewRequestWithContext(ctx, "POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
	if _, err := hc.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: err %v, want context.Canceled", err)
	}
	c := New(Options{HTTPClient: hc, Timeout: 50 * time.Millisecond})
	_, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: addr + "/x", Body: []byte(`{}`)})
	var te *TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("Client.Do: err %v, want a *TimeoutError", err)
	}
}

// TestTransportRefusesBadHeaders: a header name or value that would end
// the header early is refused before anything is sent.
func TestTransportRefusesBadHeaders(t *testing.T) {
	addr, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {})
	hc := NewHTTPClient(4, nil)
	for _, h := range []http.Header{
		{"X-A": {"v\r\nX-Injected: 1"}},
		{"X-A": {"v\n"}},
		{"Bad Name": {"v"}},
		{"X-A\r\nX-B": {"v"}},
	} {
		req, _ := http.NewRequest("POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
		req.Header = h
		if _, err := hc.Do(req); err == nil || !strings.Contains(err.Error(), "invalid header") {
			t.Errorf("header %q: err %v, want an invalid header error", h, err)
		}
	}
	if got := conns.Load(); got != 0 {
		t.Fatalf("%d connections opened for refused requests, want 0", got)
	}
}

// fallbackRecorder counts the requests that fall back to it.
type fallbackRecorder struct{ urls []string }

func (f *fallbackRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	f.urls = append(f.urls, r.URL.String())
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

// TestTransportFallsBack: https, a request through a proxy and a body of
// unknown length are sent by the fallback transport.
func TestTransportFallsBack(t *testing.T) {
	fb := &fallbackRecorder{}
	tr := &Transport{Fallback: fb, Proxy: func(r *http.Request) (*url.URL, error) {
		if r.URL.Host == "via-proxy:80" {
			return url.Parse("http://proxy:3128")
		}
		return nil, nil
	}}
	hc := &http.Client{Transport: tr}
	reqs := []*http.Request{}
	r, _ := http.NewRequest("GET", "https://example.invalid/v1/models", nil)
	reqs = append(reqs, r)
	r, _ = http.NewRequest("GET", "http://via-proxy:80/v1/models", nil)
	reqs = append(reqs, r)
	r, _ = http.NewRequest("POST", "http://unknown-length.invalid/x", io.MultiReader(strings.NewReader("{}")))
	reqs = append(reqs, r)
	for _, r := range reqs {
		resp, err := hc.Do(r)
		if err != nil {
			t.Fatalf("%s: %v", r.URL, err)
		}
		resp.Body.Close()
	}
	want := []string{"https://example.invalid/v1/models", "http://via-proxy:80/v1/models", "http://unknown-length.invalid/x"}
	if !reflect.DeepEqual(fb.urls, want) {
		t.Fatalf("fell back: %q, want %q", fb.urls, want)
	}
}

// FuzzTransportReadsAsNetHTTP: whatever bytes a server answers with,
// Transport returns what net/http's transport returns: an error for both,
// or the same status and body (and an error reading it for both or
// neither).
func FuzzTransportReadsAsNetHTTP(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"error\":{\"message\":\"x\"}}\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n0\r\nX-Sum: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"garbage",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
			if readRequest(br) {
				c.Write(answer)
			}
		})
		type outcome struct {
			err     bool
			status  int
			body    string
			bodyErr bool
		}
		var bodyErrs []error
		get := func(rt http.RoundTripper) outcome {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return outcome{err: true}
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			bodyErrs = append(bodyErrs, err)
			return outcome{status: resp.StatusCode, body: string(b), bodyErr: err != nil}
		}
		theirs := &http.Transport{DisableCompression: true, DisableKeepAlives: true}
		defer theirs.CloseIdleConnections()
		ours := &Transport{Fallback: failTransport{t}}
		defer ours.CloseIdleConnections()
		if a, b := get(ours), get(theirs); a != b {
			// net/http's own body, which reads the chunked answers the
			// transport's parser declines, makes the same error anew.
			if a.bodyErr && !b.bodyErr && bodyErrs[0].Error() == errLongTrailer.Error() {
				t.Skip("trailer fields longer than Transport's 512-byte buffer (net/http's is 4 KB): refused (TestTransportRefusesLongTrailers)")
			}
			t.Fatalf("answer %q: Transport %+v, net/http %+v", answer, a, b)
		}
	})
}

// TestTransportRefusesLongTrailers: trailer fields after a chunked body
// that do not fit in the connection's 512-byte buffer are refused, as
// net/http refuses those over its 4 KB buffer; shorter ones are read.
func TestTransportRefusesLongTrailers(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want error
	}{{300, nil}, {600, errLongTrailer}} {
		answer := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: " + strings.Repeat("a", tt.n) + "\r\n\r\n"
		addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
			if readRequest(br) {
				io.WriteString(c, answer)
			}
		})
		req, _ := http.NewRequest("POST", addr+"/x", bytes.NewReader([]byte(`{}`)))
		resp, err := (&Transport{}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "hello" || !errors.Is(err, tt.want) {
			t.Fatalf("%d-byte trailer: %q, %v; want hello, %v", tt.n, b, err, tt.want)
		}
		if tt.want == nil && len(resp.Trailer.Get("X-Sum")) != tt.n {
			t.Fatalf("%d-byte trailer read as %d bytes", tt.n, len(resp.Trailer.Get("X-Sum")))
		}
	}
}

// TestPartsSentWhole: a body given in pieces arrives as their
// concatenation, through Transport and through net/http's transport, and
// again on a retry (the pieces are not consumed by a send).
func TestPartsSentWhole(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Header.Get("Content-Type")+" "+string(b))
		n := len(got)
		mu.Unlock()
		if n%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // retried
		}
	}))
	defer srv.Close()
	parts := [][]byte{[]byte(`{"a":`), {}, []byte(strings.Repeat("1", 9000)), []byte(`}`)}
	want := "application/json " + `{"a":` + strings.Repeat("1", 9000) + `}`
	for _, hc := range []*http.Client{NewHTTPClient(2, nil), {Transport: &http.Transport{}}} {
		c := New(Options{HTTPClient: hc, Retry: fast(1)})
		if _, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL, Parts: parts, Body: []byte("ignored")}); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 4 {
		t.Fatalf("%d requests, want 4", len(got))
	}
	for i, g := range got {
		if g != want {
			t.Errorf("request %d: body %.40q... (%d bytes), want %.40q... (%d bytes)", i+1, g, len(g), want, len(want))
		}
	}
}

// TestClientFollowsRedirectsAroundTransport: Client hands requests to
// Transport itself, but an answer that redirects is still followed, the
// body sent again, as http.Client follows it; a transport error is a
// *url.Error naming the request, as http.Client returns it.
func TestClientFollowsRedirectsAroundTransport(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			io.Copy(io.Discard, r.Body)
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got.Store(r.Method + " " + r.URL.Path + " " + string(b))
		w.Write([]byte("ok"))
	}))
	defer srv.Close()
	c := New(Options{HTTPClient: NewHTTPClient(2, nil)})
	resp, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: srv.URL + "/a", Parts: [][]byte{[]byte(`{"x":`), []byte(`1}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Body) != "ok" || got.Load() != `POST /b {"x":1}` {
		t.Fatalf("answer %q, server read %q; want ok and POST /b {\"x\":1}", resp.Body, got.Load())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = c.Send(context.Background(), &Request{Method: "POST", URL: "http://" + addr + "/x", Body: []byte(`{}`)})
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Op != "Post" || ue.URL != "http://"+addr+"/x" || !IsTransient(err) {
		t.Fatalf("refused connection: %v (%T), want a transient *url.Error for Post http://%s/x", err, err, addr)
	}
}

// TestAttemptDeadlines: the per-attempt timeout Transport holds an
// exchange to, without a context of its own, covers the answer's head,
// its body and a redirect, and gives way to the caller's context.
func TestAttemptDeadlines(t *testing.T) {
	stall := make(chan struct{})
	addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			switch req.URL.Path {
			case "/head": // nothing
			case "/body":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf ")
			case "/redirect":
				// The connection stays open (closing it would race with
				// the client reusing it for the redirect): the next
				// request is served on it.
				io.WriteString(c, "HTTP/1.1 307 Temporary Redirect\r\nLocation: /head\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			<-stall
			return
		}
	})
	t.Cleanup(func() { close(stall) }) // before the server's cleanup waits for its handlers
	timeout := 300 * time.Millisecond
	c := New(Options{Timeout: timeout})
	if c.transport() == nil {
		t.Fatal("the default client does not use Transport")
	}
	for _, path := range []string{"/head", "/body", "/redirect"} {
		start := time.Now()
		_, _, err := c.Do(context.Background(), &Request{Method: "POST", URL: addr + path, Body: []byte(`{}`)})
		var te *TimeoutError
		if !errors.As(err, &te) || te.After != timeout {
			t.Errorf("%s: err %v, want a TimeoutError after %v", path, err, timeout)
		}
		if d := time.Since(start); d < timeout {
			t.Errorf("%s: gave up after %v, before the timeout", path, d)
		}
	}
	// The caller's deadline, earlier than the attempt's, is the one kept,
	// and its error is the caller's.
	c = New(Options{Timeout: time.Minute})
	for _, path := range []string{"/head", "/body"} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, _, err := c.Do(ctx, &Request{Method: "POST", URL: addr + path, Body: []byte(`{}`)})
		cancel()
		var te *TimeoutError
		if errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s under the caller's deadline: err %v, want context.DeadlineExceeded", path, err)
		}
	}
}

// TestOpenCheckAllocatesOnce: checking an idle connection before reuse
// allocates nothing after its first check (every reused connection is
// checked, so a closure per check was an allocation per call).
func TestOpenCheckAllocatesOnce(t *testing.T) {
	addr, _ := rawServer(t, func(c net.Conn, br *bufio.Reader) { br.ReadByte() })
	c, err := (&Transport{}).dialNow(context.Background(), time.Time{}, strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.open() {
		t.Fatal("a connection the server keeps open is not open")
	}
	if n := testing.AllocsPerRun(100, func() { c.open() }); n != 0 {
		t.Fatalf("%v allocations per check, want 0", n)
	}
}

// TestDoReadsEachFormOnAKeptConnection: Client.Do returns an answer as
// soon as its body is whole — empty, with a length, chunked, chunked with
// trailer fields, its last chunk sent apart — while the server keeps the
// connection open for the next request, and the connection is reused. A
// read past a body's end would wait for bytes that never come, until the
// context's deadline, which closes the connection.
func TestDoReadsEachFormOnAKeptConnection(t *testing.T) {
	for name, answer := range map[string]string{
		"empty":   "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
		"no body": "HTTP/1.1 204 No Content\r\n\r\n",
		"length":  "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n",
		"trailer": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n\r\n",
		"apart":   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n|0\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			addr, conns := rawServer(t, func(c net.Conn, br *bufio.Reader) {
				for readRequest(br) {
					for i, part := range strings.Split(answer, "|") {
						if i > 0 {
							time.Sleep(5 * time.Millisecond)
						}
						io.WriteString(c, part)
					}
				}
			})
			c := New(Options{HTTPClient: NewHTTPClient(4, nil)})
			for i := range 3 {
				// A read that waits past the body's end waits for this
				// deadline, which then closes the connection.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, _, err := c.Do(ctx, &Request{Method: "POST", URL: addr + "/x", Body: []byte(`{}`)})
				cancel()
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				if want := answer[strings.Index(answer, "\r\n\r\n")+4:]; want != "" && string(resp.Body) != "hello" || want == "" && len(resp.Body) > 0 {
					t.Fatalf("request %d: %q, want %q", i+1, resp.Body, want)
				}
			}
			if got := conns.Load(); got != 1 {
				t.Fatalf("%d connections for 3 requests, want 1", got)
			}
		})
	}
}
