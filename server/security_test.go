package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/server"
)

// send posts body with the given headers and returns status and body.
func send(t *testing.T, ctx context.Context, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func listLen(t *testing.T, base string) int {
	t.Helper()
	_, body := do(t, "GET", base+"/api/v1/runs", "", "")
	return strings.Count(string(body), `"name"`)
}

// TestBrowserCannotDrive: what a page of another site (or a rebound DNS
// name) can send is refused, and nothing is stored.
func TestBrowserCannotDrive(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{AllowedOrigins: []string{"http://grafana.example:3000"}})
	base := s.URL()
	host := strings.TrimPrefix(base, "http://")
	ctx := context.Background()
	cfg := smallRun("x", 1)
	for _, tt := range []struct {
		name   string
		header map[string]string
		code   int
		want   string
	}{
		{"cross-origin text/plain", map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example"}, 403, "Origin http://evil.example may not drive"},
		{"same-origin text/plain", map[string]string{"Content-Type": "text/plain", "Origin": base}, 415, "Content-Type text/plain is not accepted"},
		{"form", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "send application/json or application/yaml"},
		{"no content type", nil, 415, "Content-Type none"},
		{"cross-origin json", map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, 403, "may not drive"},
		{"null origin", map[string]string{"Content-Type": "application/yaml", "Origin": "null"}, 403, "may not drive"},
		{"dns rebinding", map[string]string{"Content-Type": "application/yaml", "Host": "evil.example:" + host[strings.LastIndex(host, ":")+1:]}, 421, "does not name this daemon"},
		{"rebinding with origin", map[string]string{"Content-Type": "application/yaml", "Host": "evil.example", "Origin": "http://evil.example"}, 421, "does not name this daemon"},
	} {
		code, body := send(t, ctx, "POST", base+"/api/v1/runs", cfg, tt.header)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: POST = %d %s, want %d containing %q", tt.name, code, body, tt.code, tt.want)
		}
		code, _ = send(t, ctx, "POST", base+"/api/v1/runs/x/cancel", "", tt.header)
		if code != tt.code {
			t.Errorf("%s: cancel = %d, want %d", tt.name, code, tt.code)
		}
	}
	// A rebound name cannot read either.
	if code, _ := send(t, ctx, "GET", base+"/api/v1/runs", "", map[string]string{"Host": "evil.example"}); code != 421 {
		t.Errorf("GET with a foreign Host = %d, want 421", code)
	}
	if n := listLen(t, base); n != 0 {
		t.Fatalf("%d runs stored after refused requests, want 0", n)
	}
	// The daemon's own page, an allowed origin and localhost are accepted.
	for i, h := range []map[string]string{
		{"Content-Type": "application/yaml; charset=utf-8", "Origin": base},
		{"Content-Type": "application/json", "Origin": "http://grafana.example:3000"},
		{"Content-Type": "application/yaml", "Host": "localhost:" + host[strings.LastIndex(host, ":")+1:]},
	} {
		name := fmt.Sprintf("ok%d", i)
		body := smallRun(name, 1)
		if h["Content-Type"] == "application/json" {
			body = `{"run": {"name": "` + name + `", "steps": 1}, "validation": {"episodes": 4}}`
		}
		if code, resp := send(t, ctx, "POST", base+"/api/v1/runs", body, h); code != http.StatusCreated {
			t.Fatalf("POST with %v = %d %s, want 201", h, code, resp)
		}
		waitRun(t, base, name, "finish", finished)
	}
}

// TestPostedConfigLimits: what a posted config may not ask is refused
// before anything is stored, and the daemon stays up.
func TestPostedConfigLimits(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{Limits: config.DefaultLimits(), MaxBodyBytes: 4096})
	base := s.URL()
	var bomb strings.Builder
	bomb.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&bomb, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	for _, tt := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"rounds 1e9", "env: {rounds: 1000000000}", 400, "env.rounds: is 1000000000; at most 200"},
		{"rounds 1e9 as float", "env: {rounds: 1e9}", 400, "env.rounds"},
		{"n 1000", "env: {n: 1000}", 400, "env.n: is 1000; at most 64"},
		{"steps", "run: {steps: 1000000}", 400, "run.steps"},
		{"episodes", "grpo: {groups: 5000}", 400, "at most 4096"},
		{"path-like name", "run: {name: ../../etc/x}", 400, "run.name"},
		{"absolute name", "run: {name: /tmp/x}", 400, "run.name"},
		{"store path", "run: {db: /tmp/other.db}", 400, "run.db chooses a file path"},
		{"alias bomb", bomb.String(), 400, "through aliases"},
		{"alias cycle", "inference: &i {<<: *i}", 400, "alias to itself"},
		{"body size", "run: {name: " + strings.Repeat("a", 5000) + "}", 413, "larger than 4096 bytes"},
	} {
		// The answer must come within 3 s, whatever the body.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		code, body := send(t, ctx, "POST", base+"/api/v1/runs", tt.body, map[string]string{"Content-Type": "application/yaml"})
		cancel()
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("%s: POST = %d %s, want %d containing %q", tt.name, code, body, tt.code, tt.want)
		}
	}
	if code, body := do(t, "GET", base+"/healthz", "", ""); code != 200 || body == nil {
		t.Fatalf("daemon down after refused configs: %d", code)
	}
	if n := listLen(t, base); n != 0 {
		t.Fatalf("%d runs stored after refused configs, want 0", n)
	}
}

// keyRecorder is a fake inference server that records the Authorization
// header of every request and fails them all, so the run stops at its
// health check.
type keyRecorder struct {
	mu   sync.Mutex
	auth []string
	srv  *httptest.Server
}

func newKeyRecorder(t *testing.T) *keyRecorder {
	k := &keyRecorder{}
	k.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.auth = append(k.auth, r.Header.Get("Authorization"))
		k.mu.Unlock()
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(k.srv.Close)
	return k
}

func (k *keyRecorder) seen() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.auth...)
}

// TestPostedConfigCannotReadSecrets: a posted config cannot send the
// daemon's secrets to a URL it chooses; a declared peer gets its own key.
func TestPostedConfigCannotReadSecrets(t *testing.T) {
	declared, attacker := newKeyRecorder(t), newKeyRecorder(t)
	peers, err := config.ParsePeers([]byte("inference:\n  vllm-a: {url: '" + declared.srv.URL + "/v1', api_key_env: VLLM_KEY}\n"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"VLLM_KEY": "declared-key", "OPENAI_API_KEY": "openai-secret", "HOME_SECRET": "home-secret"}
	e := newEnv(t)
	s := e.MustStart(t, server.Options{Peers: peers, Getenv: func(k string) string { return secrets[k] }})
	base := s.URL()
	jobs := "trainer: {kind: jobs, url: '" + attacker.srv.URL + "'}\n"

	code, body := do(t, "POST", base+"/api/v1/runs", "", "inference: {endpoints: [{url: '"+attacker.srv.URL+"/v1', api_key_env: HOME_SECRET}]}\n"+jobs)
	if code != 400 || !contains(body, "cannot choose which environment variables") {
		t.Fatalf("POST with api_key_env = %d %s, want 400", code, body)
	}
	// A posted URL without api_key_env gets no key at all, not the
	// OPENAI_API_KEY default.
	code, body = do(t, "POST", base+"/api/v1/runs", "", "run: {name: a}\ninference: {endpoints: [{url: '"+attacker.srv.URL+"/v1'}]}\n"+jobs)
	if code != http.StatusBadGateway {
		t.Fatalf("POST to the attacker's URL = %d %s, want 502 (its health check fails)", code, body)
	}
	got := attacker.seen()
	if len(got) == 0 {
		t.Fatal("the attacker's server saw no request; the test proves nothing")
	}
	for _, a := range got {
		if a != "" {
			t.Fatalf("the attacker's server received Authorization %q", a)
		}
	}
	// The declared peer gets its declared key.
	code, body = do(t, "POST", base+"/api/v1/runs", "", "run: {name: b}\ninference: {endpoints: [{peer: vllm-a}]}\n"+jobs)
	if code != http.StatusBadGateway {
		t.Fatalf("POST to the peer = %d %s, want 502", code, body)
	}
	if got := declared.seen(); len(got) == 0 || got[0] != "Bearer declared-key" {
		t.Fatalf("the declared peer received %q, want Bearer declared-key", got)
	}
	// With --peers-only a URL is refused outright.
	s.Close()
	s2 := e.MustStart(t, server.Options{Peers: peers, PeersOnly: true, Getenv: func(k string) string { return secrets[k] }})
	before := len(attacker.seen())
	code, body = do(t, "POST", s2.URL()+"/api/v1/runs", "", "inference: {endpoints: [{url: '"+attacker.srv.URL+"/v1'}]}\n"+jobs)
	if code != 400 || !contains(body, "--peers-only") {
		t.Fatalf("POST of a URL with PeersOnly = %d %s, want 400", code, body)
	}
	if len(attacker.seen()) != before {
		t.Fatal("the attacker's server was reached under PeersOnly")
	}
}

// TestMaxRuns: a launch beyond the limit of concurrent runs is refused
// with 429 and nothing stored.
func TestMaxRuns(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{MaxRuns: 1})
	base := s.URL()
	launch(t, base, "", smallRun("long", 200))
	code, body := do(t, "POST", base+"/api/v1/runs", "", smallRun("second", 1))
	if code != http.StatusTooManyRequests || !contains(body, "1 of at most 1") {
		t.Fatalf("second launch = %d %s, want 429", code, body)
	}
	if code, body := do(t, "POST", base+"/api/v1/runs/long/cancel", "", ""); code != 200 {
		t.Fatalf("cancel = %d %s", code, body)
	}
	if n := listLen(t, base); n != 1 {
		t.Fatalf("%d runs stored, want 1", n)
	}
}

// TestTrickledBodiesAreCut: a request whose body trickles in is cut at the
// daemon's read deadline on every endpoint (only a posted config had one:
// promote or a refused create held the connection for as long as the
// client liked).
func TestTrickledBodiesAreCut(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{BodyTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(s.URL(), "http://")
	for _, head := range []string{
		"POST /api/v1/runs/x/promote HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{",
		"POST /api/v1/runs HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: text/plain\r\nContent-Length: 60000\r\n\r\nx",
		"GET /healthz HTTP/1.1\r\nHost: " + addr + "\r\nContent-Length: 60000\r\n\r\nx",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatal(err)
		}
		// The client sends nothing more; the daemon must close the
		// connection (well before this test's own 20 s deadline).
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err = io.ReadAll(c)
		c.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%q: the daemon held the trickling connection open", strings.SplitN(head, "\r\n", 2)[0])
		}
	}
}

// TestNoFraming: every answer forbids framing the dashboard elsewhere and
// sniffing its type.
func TestNoFraming(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	for _, path := range []string{"/", "/api/v1/runs", "/api/v1/nothing"} {
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("Content-Security-Policy") != "frame-ancestors 'none'" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s headers %v: want X-Frame-Options DENY, frame-ancestors 'none', nosniff", path, resp.Header)
		}
	}
}
