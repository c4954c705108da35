package inference

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/testutil"
)

func TestPoolSpreadsByOutstanding(t *testing.T) {
	// Endpoint A blocks until released; B answers at once. With A busy,
	// the next requests must go to B.
	release := make(chan struct{})
	var hitsA, hitsB atomic.Int64
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		<-release
		w.Write([]byte(okCompletion))
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsB.Add(1)
		w.Write([]byte(okCompletion))
	}))
	defer b.Close()
	p := testFleet(t, FleetOptions{}, a.URL, b.URL)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := p.Complete(context.Background(), chatReq()); err != nil {
			t.Error(err)
		}
	})
	for hitsA.Load() == 0 {
		// wait until the first request is in flight at A
		runtime.Gosched()
	}
	for range 5 {
		if _, err := p.Complete(context.Background(), chatReq()); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	wg.Wait()
	if hitsA.Load() != 1 || hitsB.Load() != 5 {
		t.Fatalf("hits A=%d B=%d, want 1 and 5", hitsA.Load(), hitsB.Load())
	}
}

func TestPool_DrainsEndpointAnswering500(t *testing.T) {
	// A answers 500 to everything and has nothing in flight; B is healthy.
	// Least-outstanding alone would keep choosing A.
	bad, badSrv := newFakeVLLM(t)
	bad.chat = http.StatusInternalServerError
	bad.health = http.StatusInternalServerError
	good, goodSrv := newFakeVLLM(t)
	reg := NewFleetMetrics(prometheus.NewRegistry())
	p := testFleet(t, FleetOptions{Metrics: reg, Run: "r"}, badSrv.URL, goodSrv.URL)
	for range 6 {
		if _, err := p.Complete(context.Background(), chatReq()); err != nil {
			t.Fatal(err)
		}
	}
	count := func(f *fakeVLLM) int {
		n := 0
		for _, e := range f.log() {
			if strings.HasPrefix(e, "chat ") {
				n++
			}
		}
		return n
	}
	if got, want := count(bad), 1; got > want {
		t.Fatalf("failing endpoint got %d requests, want at most %d", got, want)
	}
	if got, want := count(good), 6; got != want {
		t.Fatalf("healthy endpoint got %d requests, want %d", got, want)
	}
	if got, want := p.Live(), []bool{false, true}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	// Probing does not readmit it while /health fails.
	p.Tick(context.Background())
	if p.Live()[0] {
		t.Fatal("readmitted an endpoint whose /health fails")
	}
	badURL := badSrv.URL + "/v1"
	if got := metricValue(t, reg.up.WithLabelValues("r", badURL)); got != 0 {
		t.Fatalf("up=%v, want 0", got)
	}
	if got := metricValue(t, reg.drains.WithLabelValues("r", badURL)); got != 1 {
		t.Fatalf("drains=%v, want 1", got)
	}
}

func TestPool_ReadmissionLoadsAdaptersFirst(t *testing.T) {
	a, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	reg := NewFleetMetrics(prometheus.NewRegistry())
	var mu sync.Mutex
	var changes []string
	onEndpoint := func(c EndpointChange) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, fmt.Sprintf("%s up=%v err=%v probe_in>0=%v probe_every=%v", c.URL, c.Up, c.Err != nil, c.ProbeIn > 0, c.ProbeEvery))
	}
	p := testFleet(t, FleetOptions{Metrics: reg, Run: "r", OnEndpoint: onEndpoint}, sa.URL, sb.URL)
	ctx := context.Background()
	if err := p.LoadEverywhere(ctx, "r-step-0001", "/a/1"); err != nil {
		t.Fatal(err)
	}
	// B goes down: health fails, the probe drains it.
	b.set(func(f *fakeVLLM) {
		f.health = http.StatusServiceUnavailable
		f.adapters = map[string]string{}
		f.events = nil
	})
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	// Step 2's adapter goes to the live endpoint only.
	if err := p.LoadEverywhere(ctx, "r-step-0002", "/a/2"); err != nil {
		t.Fatal(err)
	}
	if !a.has("r-step-0002") || b.has("r-step-0002") {
		t.Fatal("step 2 adapter should be on A only")
	}
	// B answers again (restarted, empty): readmitted with both adapters
	// loaded before any request reaches it.
	b.set(func(f *fakeVLLM) { f.health = 0 })
	time.Sleep(2 * time.Millisecond) // past the probe delay
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, true}; !slices.Equal(got, want) {
		t.Fatalf("Live() after recovery=%v, want %v", got, want)
	}
	for range 4 {
		if _, err := p.Complete(ctx, chatReq()); err != nil {
			t.Fatal(err)
		}
	}
	log := b.log()
	if len(log) < 3 || log[0] != "load r-step-0001 /a/1" || log[1] != "load r-step-0002 /a/2" || !strings.HasPrefix(log[2], "chat ") {
		t.Fatalf("B's events=%v, want both loads before the first chat", log)
	}
	if got := metricValue(t, reg.readmissions.WithLabelValues("r", sb.URL+"/v1")); got != 1 {
		t.Fatalf("readmissions=%v, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{sb.URL + "/v1 up=false err=true probe_in>0=true probe_every=1ms", sb.URL + "/v1 up=true err=false probe_in>0=false probe_every=0s"}
	if !slices.Equal(changes, want) {
		t.Fatalf("OnEndpoint was told %q, want %q", changes, want)
	}
}

// TestPool_ReadmissionChecksBaseModel: a drained replica that answers
// again serving another base model, or the same name from other weights,
// is not readmitted (it took the run's adapters and requests); back with
// the model it served, it is.
func TestPool_ReadmissionChecksBaseModel(t *testing.T) {
	_, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	p := testFleet(t, FleetOptions{Model: "Qwen/Qwen3-14B"}, sa.URL, sb.URL)
	ctx := context.Background()
	if err := p.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.LoadEverywhere(ctx, "r-step-0001", "/a/1"); err != nil {
		t.Fatal(err)
	}
	b.set(func(f *fakeVLLM) {
		f.health = http.StatusServiceUnavailable
		f.adapters = map[string]string{}
		f.events = nil
	})
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	lastErr := func() string {
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Sprint(p.eps[1].lastErr)
	}
	for _, tt := range []struct{ base, root, want string }{
		{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "no longer lists inference.model Qwen/Qwen3-14B (it serves Qwen/Qwen3-8B; restarted with another model?): it stays drained until it serves Qwen/Qwen3-14B again"},
		{"Qwen/Qwen3-14B", "/models/qwen3-14b-dpo", "serves Qwen/Qwen3-14B from /models/qwen3-14b-dpo now, not from Qwen/Qwen3-14B as when the run saw it first"},
	} {
		b.set(func(f *fakeVLLM) { f.health, f.base, f.baseRoot = 0, tt.base, tt.root })
		time.Sleep(5 * time.Millisecond) // past the probe delay
		p.Tick(ctx)
		if got, want := p.Live(), []bool{true, false}; !slices.Equal(got, want) {
			t.Fatalf("back serving %s from %s: Live()=%v, want %v", tt.base, tt.root, got, want)
		}
		if got := lastErr(); !strings.Contains(got, tt.want) {
			t.Fatalf("back serving %s from %s: last error %q, want %q", tt.base, tt.root, got, tt.want)
		}
		if got := b.log(); len(got) != 0 {
			t.Fatalf("back serving %s from %s, it was sent %v, want nothing", tt.base, tt.root, got)
		}
	}
	b.set(func(f *fakeVLLM) { f.base, f.baseRoot = "", "" })
	time.Sleep(5 * time.Millisecond)
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, true}; !slices.Equal(got, want) {
		t.Fatalf("back serving its model: Live()=%v, want %v (last error %s)", got, want, lastErr())
	}
	if got, want := b.log(), []string{"load r-step-0001 /a/1"}; !slices.Equal(got, want) {
		t.Fatalf("readmitted, it was sent %v, want %v", got, want)
	}
}

// TestPool_ReadmissionModelIsAnAdapter: a fleet whose model is an
// adapter's name (listed with a parent) holds no base model to check, so
// an endpoint back without it is readmitted, as before the check; it was
// kept drained for good, the adapter taken for the base model once seen.
func TestPool_ReadmissionModelIsAnAdapter(t *testing.T) {
	a, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	for _, f := range []*fakeVLLM{a, b} {
		f.set(func(f *fakeVLLM) { f.adapters = map[string]string{"team-adapter": "/a/t"} })
	}
	p := testFleet(t, FleetOptions{Model: "team-adapter"}, sa.URL, sb.URL)
	ctx := context.Background()
	if err := p.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	b.set(func(f *fakeVLLM) { f.health, f.adapters = http.StatusServiceUnavailable, map[string]string{} })
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	b.set(func(f *fakeVLLM) { f.health = 0 })
	time.Sleep(5 * time.Millisecond) // past the probe delay
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, true}; !slices.Equal(got, want) {
		p.mu.Lock()
		err := p.eps[1].lastErr
		p.mu.Unlock()
		t.Fatalf("back: Live()=%v, want %v (last error %v)", got, want, err)
	}
}

// TestPool_HealthDrainNamesEndpointOnce: a failed health probe that
// drains an endpoint is told beside its URL (the endpoint_state event,
// the log line, the error of an outage that outlasts the window); each
// said "endpoint URL: endpoint URL: health: ..." (grpo watch: "inference
// endpoint URL down: endpoint URL: health: ...").
func TestPool_HealthDrainNamesEndpointOnce(t *testing.T) {
	a, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	b.health = http.StatusServiceUnavailable
	var mu sync.Mutex
	var told []EndpointChange
	var logs bytes.Buffer
	p := testFleet(t, FleetOptions{
		OutageWindow: time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(&syncWriter{w: &logs, mu: &mu}, nil)),
		OnEndpoint: func(c EndpointChange) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, c)
		},
	}, sa.URL, sb.URL)
	ctx := context.Background()
	p.Tick(ctx)
	if got, want := p.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	// The other endpoint fails its request too: none is left.
	a.set(func(f *fakeVLLM) { f.chat = http.StatusServiceUnavailable })
	_, err := p.Complete(ctx, chatReq())
	bURL := sb.URL + "/v1"
	if !errors.Is(err, ErrNoEndpoint) || strings.Count(err.Error(), "endpoint "+bURL) != 1 || !strings.Contains(err.Error(), "endpoint "+bURL+": health: GET "+sb.URL+"/health: 503") {
		t.Fatalf("Complete()=%v, want ErrNoEndpoint naming %s once, with its health probe's 503", err, bURL)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) == 0 || told[0].URL != bURL || told[0].Err == nil || !strings.HasPrefix(told[0].Err.Error(), "health: GET "+sb.URL+"/health: 503") {
		t.Fatalf("OnEndpoint was told %+v, want %s down for its health probe's 503, not named again", told, bURL)
	}
	drained := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "inference endpoint drained") && strings.Contains(line, bURL) {
			drained++
			if strings.Count(line, bURL) != 1 {
				t.Fatalf("log line %q names %s more than once", line, bURL)
			}
		}
	}
	if drained != 1 {
		t.Fatalf("%d log lines say %s was drained, want 1:\n%s", drained, bURL, logs.String())
	}
}

// TestPool_ErrorNamesEachFactOnce: the error of an outage that outlasts
// the window, and of a request the server refuses, names each endpoint's
// URL once (its request's URL: "POST URL/chat/completions") and the model
// once per failure, and keeps the attempts, the status, the server's
// message and the wait. Each layer (the chat client, the fleet's
// "endpoint URL:", the request's "chat completion (model ...)") named
// them again: "... endpoint URL: chat completion at URL/chat/completions
// (model "m", 1 attempt(s)): POST URL/chat/completions: 503 ...".
func TestPool_ErrorNamesEachFactOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		endpoints int
		status    int
		want      []string
	}{
		{"one endpoint down", 1, http.StatusServiceUnavailable, []string{"no live inference endpoint after waiting 1ms", "1 attempt(s)", "503 Service Unavailable", "engine dead"}},
		{"two endpoints down", 2, http.StatusServiceUnavailable, []string{"no live inference endpoint after waiting 1ms", "1 attempt(s)", "503 Service Unavailable", "engine dead"}},
		{"request refused", 1, http.StatusBadRequest, []string{"1 attempt(s)", "400 Bad Request", "engine dead"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var urls []string
			for range tc.endpoints {
				f, srv := newFakeVLLM(t)
				f.chat = tc.status
				urls = append(urls, srv.URL)
			}
			var mu sync.Mutex
			var told []EndpointChange
			p := testFleet(t, FleetOptions{OutageWindow: time.Millisecond, OnEndpoint: func(c EndpointChange) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, c)
			}}, urls...)
			_, err := p.Complete(context.Background(), chatReq())
			var se *httpx.StatusError
			if !errors.As(err, &se) || se.StatusCode != tc.status {
				t.Fatalf("Complete()=%v, want an *httpx.StatusError %d", err, tc.status)
			}
			if got, want := errors.Is(err, ErrNoEndpoint), tc.status != http.StatusBadRequest; got != want {
				t.Fatalf("Complete()=%v: errors.Is(ErrNoEndpoint)=%v, want %v", err, got, want)
			}
			msg := err.Error()
			for _, u := range urls {
				if got := strings.Count(msg, u+"/v1"); got != 1 {
					t.Errorf("Complete()=%q names %s/v1 %d times, want once", msg, u, got)
				}
			}
			if got, want := strings.Count(msg, `model "m"`), tc.endpoints; got != want {
				t.Errorf("Complete()=%q names the model %d times, want %d (once per failure)", msg, got, want)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("Complete()=%q does not say %q", msg, w)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.status != http.StatusBadRequest && len(told) == 0 {
				t.Fatal("OnEndpoint was not told of a drain")
			}
			for _, c := range told {
				if c.Err != nil && strings.Count(c.Err.Error(), c.URL) > 1 {
					t.Errorf("OnEndpoint was told %s down for %q, naming it more than once", c.URL, c.Err)
				}
			}
		})
	}
}

// syncWriter serialises writes to w.
type syncWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestPool_InflightOnDrainedEndpointGoesElsewhere(t *testing.T) {
	a, sa := newFakeVLLM(t)
	a.chatBlock = make(chan struct{}) // A hangs
	defer close(a.chatBlock)
	_, sb := newFakeVLLM(t)
	p := testFleet(t, FleetOptions{}, sa.URL, sb.URL)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(ctx, chatReq())
		done <- err
	}()
	// Wait until the request is in flight at A, or answered by B (then
	// nothing is in flight at A to test). A loaded machine may take
	// seconds to send it: only an answer ends the wait early.
	atA := testutil.Eventually(func() bool {
		select {
		case err := <-done:
			t.Skipf("the request went to B (%v); nothing in flight at A", err)
		default:
		}
		return len(a.log()) > 0
	})
	if !atA {
		t.Fatalf("the request reached neither endpoint within %s", testutil.Patience)
	}
	a.set(func(f *fakeVLLM) { f.health = http.StatusServiceUnavailable })
	p.Tick(ctx)
	if err := <-done; err != nil {
		t.Fatalf("request in flight at a drained endpoint: %v, want it answered by the other", err)
	}
}

// TestPool_OnlyEndpointKeepsInflight: when the only endpoint is drained,
// its requests in flight are not cancelled (there is no other endpoint to
// send them to): one that is then answered returns the answer instead of
// waiting out the outage.
func TestPool_OnlyEndpointKeepsInflight(t *testing.T) {
	a, sa := newFakeVLLM(t)
	a.chatBlock = make(chan struct{})
	p := testFleet(t, FleetOptions{OutageWindow: time.Millisecond}, sa.URL)
	done := make(chan error, 1)
	go func() {
		_, err := p.Complete(context.Background(), chatReq())
		done <- err
	}()
	a.waitLogged(t, 1)
	p.drain(p.eps[0], -1, errors.New("another request failed"))
	if p.Live()[0] {
		t.Fatal("the endpoint was not drained")
	}
	close(a.chatBlock)
	if err := <-done; err != nil {
		t.Fatalf("request in flight at the only endpoint when it was drained: %v, want its answer", err)
	}
}

// TestPool_OutageWindow, on synctest's clock: when the only endpoint
// fails, a request waits for it instead of failing, and is answered at
// the first probe that finds it back; a request whose outage window runs
// out fails then, not before, with an error that says what happened.
func TestPool_OutageWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &pipeNet{hosts: map[string]*pipeListener{}}
		tr := &http.Transport{DialContext: n.dial}
		hc := &http.Client{Transport: tr}
		ctx, cancel := context.WithCancel(context.Background())
		// Cleanups run in the bubble, last first: every goroutine ends
		// before it does, whether the test passed or not.
		t.Cleanup(func() {
			tr.CloseIdleConnections()
			synctest.Wait()
		})
		t.Cleanup(cancel)
		// fleet is a fleet of one fake, down, served over n at host.
		fleet := func(host string, opts FleetOptions) (*fakeVLLM, *Fleet) {
			f, h := newFakeVLLMHandler()
			f.chat, f.health = http.StatusServiceUnavailable, http.StatusServiceUnavailable
			srv := &http.Server{Handler: h}
			l := n.listen(host)
			go srv.Serve(l)
			t.Cleanup(func() { srv.Close(); l.Close() })
			u := "http://" + host + "/v1"
			fl := NewFleet([]Replica{{
				Chat:  NewChatClient(u, ChatOptions{HTTPClient: hc, Retry: &httpx.Policy{}}),
				Admin: NewAdminClient(u, AdminOptions{HTTPClient: hc, Retry: &httpx.Policy{}}),
			}}, opts)
			t.Cleanup(fl.Close)
			return f, fl
		}

		a, p := fleet("a:8000", FleetOptions{OutageWindow: time.Minute, ProbeInterval: time.Second})
		p.Start(ctx)
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := p.Complete(ctx, chatReq())
			done <- err
		}()
		synctest.Wait()
		if p.Live()[0] {
			t.Fatal("the only endpoint failed the request and was not drained")
		}
		// Half the window on, probed every second and still down: the
		// request waits.
		time.Sleep(30*time.Second + 500*time.Millisecond)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("request ended during the outage, %s into its 1m window: %v", time.Since(start), err)
		default:
		}
		a.set(func(f *fakeVLLM) { f.chat, f.health = 0, 0 })
		if err := <-done; err != nil {
			t.Fatalf("request after the outage: %v", err)
		}
		if got, want := time.Since(start), 31*time.Second; got != want {
			t.Fatalf("request answered %s after it was sent, want %s: at the first probe after the endpoint came back", got, want)
		}

		// With a window that has run out, the error says what happened.
		_, q := fleet("b:8000", FleetOptions{OutageWindow: time.Minute})
		start = time.Now()
		_, err := q.Complete(ctx, chatReq())
		if !errors.Is(err, ErrNoEndpoint) || !strings.Contains(err.Error(), "http://b:8000/v1") || !strings.Contains(err.Error(), "503") {
			t.Fatalf("Complete()=%v, want ErrNoEndpoint naming the endpoint and its 503", err)
		}
		if got := time.Since(start); got != time.Minute {
			t.Fatalf("Complete() failed %s after it was sent, want at the end of its 1m outage window", got)
		}
	})
}

func TestPool_RequestErrorsAreNotDrained(t *testing.T) {
	a, sa := newFakeVLLM(t)
	a.chat = http.StatusBadRequest
	p := testFleet(t, FleetOptions{}, sa.URL)
	if _, err := p.Complete(context.Background(), chatReq()); err == nil {
		t.Fatal("Complete() succeeded on a 400")
	}
	if !p.Live()[0] {
		t.Fatal("endpoint drained for the request's own 400")
	}
}

func TestPool_ConcurrencyBoundsInflight(t *testing.T) {
	a, sa := newFakeVLLM(t)
	a.chatBlock = make(chan struct{})
	p := testFleet(t, FleetOptions{Concurrency: 2}, sa.URL)
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if _, err := p.Complete(context.Background(), chatReq()); err != nil {
				t.Error(err)
			}
		})
	}
	a.waitLogged(t, 2)
	time.Sleep(20 * time.Millisecond) // let a third request through, if the bound were broken
	if got := len(a.log()); got != 2 {
		t.Fatalf("requests in flight=%d, want the concurrency bound 2", got)
	}
	close(a.chatBlock)
	wg.Wait()
	if got := len(a.log()); got != 5 {
		t.Fatalf("requests served=%d, want 5", got)
	}
}

// TestPool_SaysWhichEndpoint: an answer names the endpoint that gave it,
// the error of a request sent to an endpoint names the last one it was
// sent to (*EndpointError, its message unchanged), and that of a request
// that reached none is no *EndpointError.
func TestPool_SaysWhichEndpoint(t *testing.T) {
	a, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	p := testFleet(t, FleetOptions{}, sa.URL, sb.URL)
	if got, want := p.Endpoints(), []string{sa.URL + "/v1", sb.URL + "/v1"}; !slices.Equal(got, want) {
		t.Fatalf("Endpoints()=%v, want %v", got, want)
	}
	answered := map[string]int{}
	for range 4 {
		c, err := p.Complete(context.Background(), chatReq())
		if err != nil {
			t.Fatal(err)
		}
		answered[c.Endpoint]++
	}
	if got, want := answered, map[string]int{sa.URL + "/v1": len(a.log()), sb.URL + "/v1": len(b.log())}; !maps.Equal(got, want) {
		t.Fatalf("answers by endpoint %v, want each server's requests %v", got, want)
	}

	// The request's own error (400) at the only endpoint.
	c, sc := newFakeVLLM(t)
	c.chat = http.StatusBadRequest
	_, err := testFleet(t, FleetOptions{}, sc.URL).Complete(context.Background(), chatReq())
	var ee *EndpointError
	if !errors.As(err, &ee) || ee.Endpoint != sc.URL+"/v1" || !strings.Contains(err.Error(), "400") {
		t.Fatalf("Complete()=%v, want an *EndpointError at %s/v1 saying 400", err, sc.URL)
	}

	// The only endpoint fails and is drained; no endpoint comes back.
	d, sd := newFakeVLLM(t)
	d.chat = http.StatusServiceUnavailable
	q := testFleet(t, FleetOptions{OutageWindow: time.Millisecond}, sd.URL)
	_, err = q.Complete(context.Background(), chatReq())
	if !errors.As(err, &ee) || ee.Endpoint != sd.URL+"/v1" || !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("Complete()=%v, want ErrNoEndpoint in an *EndpointError at %s/v1", err, sd.URL)
	}
	_, err = q.Complete(context.Background(), chatReq())
	if !errors.Is(err, ErrNoEndpoint) || errors.As(err, &ee) {
		t.Fatalf("Complete() with no live endpoint=%v, want ErrNoEndpoint and no *EndpointError", err)
	}
}

// BenchmarkFleet_AcquireRelease is the fleet's own cost per request:
// picking an endpoint and releasing it, with every core contending.
func BenchmarkFleet_AcquireRelease(b *testing.B) {
	var rs []Replica
	for i := range 4 {
		u := fmt.Sprintf("http://127.0.0.1:%d/v1", 9000+i)
		rs = append(rs, Replica{Chat: NewChatClient(u, ChatOptions{}), Admin: NewAdminClient(u, AdminOptions{})})
	}
	f := NewFleet(rs, FleetOptions{Concurrency: 1 << 20})
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var since time.Time
			ep, _, _, err := f.acquire(ctx, &since)
			if err != nil {
				b.Fatal(err)
			}
			f.release(ep)
		}
	})
}

// TestPool_OnlyEndpointRetriedWithinBudget (issue 13): a request that
// fails at the only live endpoint is sent there again, with backoff,
// until the retry budget runs out: 8 failures in a row (each a 500 the
// client does not retry itself) are outlasted and the endpoint is never
// drained. With a zero budget the first failure drains it; with a budget
// shorter than the faults the request fails naming the endpoint's 500.
func TestPool_OnlyEndpointRetriedWithinBudget(t *testing.T) {
	flaky := func(failures int64) (*httptest.Server, *atomic.Int64) {
		_, fake := newFakeVLLM(t)
		var chats atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/chat/completions") && chats.Add(1) <= failures {
				vllmError(w, http.StatusInternalServerError, "InternalServerError", "injected")
				return
			}
			fake.Config.Handler.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		return srv, &chats
	}
	fast := httpx.Policy{BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

	srv, chats := flaky(8)
	reg := NewFleetMetrics(prometheus.NewRegistry())
	budget := fast
	budget.Budget = time.Minute
	p := testFleet(t, FleetOptions{Retry: budget, OutageWindow: time.Millisecond, Metrics: reg, Run: "r"}, srv.URL)
	if _, err := p.Complete(context.Background(), chatReq()); err != nil {
		t.Fatalf("Complete()=%v, want the 9th attempt's answer", err)
	}
	if n := chats.Load(); n != 9 {
		t.Fatalf("%d chat requests, want 9", n)
	}
	if got := metricValue(t, reg.drains.WithLabelValues("r", srv.URL+"/v1")); got != 0 || !p.Live()[0] {
		t.Fatalf("drains=%v live=%v, want never drained", got, p.Live())
	}

	srv, chats = flaky(8)
	q := testFleet(t, FleetOptions{Retry: fast, OutageWindow: time.Millisecond}, srv.URL)
	if _, err := q.Complete(context.Background(), chatReq()); !errors.Is(err, ErrNoEndpoint) || chats.Load() != 1 || q.Live()[0] {
		t.Fatalf("zero budget: Complete()=%v after %d requests, live %v; want ErrNoEndpoint after 1, drained", err, chats.Load(), q.Live())
	}

	srv, _ = flaky(1 << 40)
	short := fast
	short.Budget = 30 * time.Millisecond
	r := testFleet(t, FleetOptions{Retry: short, OutageWindow: time.Millisecond}, srv.URL)
	if _, err := r.Complete(context.Background(), chatReq()); !errors.Is(err, ErrNoEndpoint) || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("budget run out: Complete()=%v, want ErrNoEndpoint naming the endpoint and its 500", err)
	}
}

// TestPool_OnlyEndpointNotDrainedByHealth: a failed health probe drains
// an endpoint only when another is live; the only one is judged by its
// requests (retried within the budget), so a scattered fault on /health
// does not stop every request.
func TestPool_OnlyEndpointNotDrainedByHealth(t *testing.T) {
	a, sa := newFakeVLLM(t)
	a.health = http.StatusInternalServerError
	p := testFleet(t, FleetOptions{}, sa.URL)
	p.Tick(context.Background())
	if !p.Live()[0] {
		t.Fatal("the only endpoint was drained by one failed health probe")
	}
	_, sb := newFakeVLLM(t)
	q := testFleet(t, FleetOptions{}, sa.URL, sb.URL)
	q.Tick(context.Background())
	if got, want := q.Live(), []bool{false, true}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v: with another endpoint live, a failed health probe drains", got, want)
	}
}
