package inference

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// testFleet is a fleet over the servers at urls (without /v1), with
// clients that do not retry and fast load retries, closed at cleanup.
func testFleet(t *testing.T, opts FleetOptions, urls ...string) *Fleet {
	t.Helper()
	noRetry := &httpx.Policy{}
	var rs []Replica
	for _, u := range urls {
		rs = append(rs, Replica{
			Chat:  NewChatClient(u+"/v1", ChatOptions{Retry: noRetry}),
			Admin: NewAdminClient(u+"/v1", AdminOptions{Retry: noRetry}),
		})
	}
	if opts.LoadRetry == nil {
		opts.LoadRetry = &httpx.Policy{Retries: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	}
	if opts.ProbeInterval == 0 {
		opts.ProbeInterval = time.Millisecond // drained endpoints are due at the next Tick
	}
	f := NewFleet(rs, opts)
	t.Cleanup(f.Close)
	return f
}

func TestFleet_LoadEverywhere(t *testing.T) {
	f1, s1 := newFakeVLLM(t)
	f2, s2 := newFakeVLLM(t)
	ctx := context.Background()
	// f2 already has the adapter from the same path, e.g. from a step
	// retried after a crash.
	if err := NewAdminClient(s2.URL+"/v1", AdminOptions{}).LoadAdapter(ctx, "r-step-0001", "/a/1", false); err != nil {
		t.Fatal(err)
	}
	reg := NewFleetMetrics(prometheus.NewRegistry())
	fleet := testFleet(t, FleetOptions{Metrics: reg, Run: "r"}, s1.URL, s2.URL)
	if err := fleet.LoadEverywhere(ctx, "r-step-0001", "/a/1"); err != nil {
		t.Fatal(err)
	}
	if !f1.has("r-step-0001") || !f2.has("r-step-0001") {
		t.Fatal("adapter not loaded on every endpoint")
	}
	if got := metricValue(t, fleetLoads(reg, "r", s2.URL+"/v1", LoadPresent)); got != 1 {
		t.Fatalf("present loads at s2=%v, want 1", got)
	}

	if err := fleet.UnloadEverywhere(ctx, "r-step-0001"); err != nil {
		t.Fatal(err)
	}
	if f1.has("r-step-0001") || f2.has("r-step-0001") {
		t.Fatal("adapter still loaded after UnloadEverywhere")
	}
	// Unloading again is done already, not an error.
	if err := fleet.UnloadEverywhere(ctx, "r-step-0001"); err != nil {
		t.Fatal(err)
	}
}

// metricValue reads a counter or gauge.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}

// fleetLoads is one child of grpo_inference_adapter_load_attempts_total.
func fleetLoads(m *FleetMetrics, run, endpoint, outcome string) prometheus.Counter {
	return m.loads.WithLabelValues(run, endpoint, outcome)
}

func TestFleet_PerStepNameFromAnotherPathIsRefused(t *testing.T) {
	f, s := newFakeVLLM(t)
	ctx := context.Background()
	// A stale adapter of the same name from another path: vLLM answers
	// 400 "already loaded" and would keep serving the old weights.
	if err := NewAdminClient(s.URL+"/v1", AdminOptions{}).LoadAdapter(ctx, "r-step-0001", "/old/1", false); err != nil {
		t.Fatal(err)
	}
	fleet := testFleet(t, FleetOptions{}, s.URL)
	err := fleet.LoadEverywhere(ctx, "r-step-0001", "/a/1")
	if !errors.Is(err, ErrAdapterConflict) {
		t.Fatalf("LoadEverywhere()=%v, want ErrAdapterConflict", err)
	}
	for _, want := range []string{`"/old/1"`, `"/a/1"`, s.URL} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if got := f.root("r-step-0001"); got != "/old/1" {
		t.Fatalf("root=%q, want the stale one untouched", got)
	}
	// A refused adapter is not the endpoint's failure: it stays live.
	if got := fleet.Live(); !got[0] {
		t.Fatal("endpoint drained for a refused adapter")
	}
}

func TestFleet_Inplace(t *testing.T) {
	for _, tc := range []struct {
		mode     string
		old      bool   // server predates load_inplace
		silent   bool   // server answers 200 to a second load and keeps the old weights
		wantErr  string // "" for success
		unloads  int    // successful unloads
		inplaces []bool // load_inplace of each load request
	}{
		{mode: InplaceAuto, old: false, unloads: 0, inplaces: []bool{true, true, true}},
		// Step 1 loads (the name is new); step 2's 400 shows the server
		// ignores the field: unload and load from then on.
		{mode: InplaceAuto, old: true, unloads: 2, inplaces: []bool{true, true, false, false}},
		// The root unchanged after a 200 shows the option was not honoured.
		{mode: InplaceAuto, silent: true, unloads: 2, inplaces: []bool{true, true, false, false}},
		{mode: InplaceReload, old: true, unloads: 2, inplaces: []bool{false, false, false}},
		{mode: InplaceLoad, old: false, unloads: 0, inplaces: []bool{true, true, true}},
		{mode: InplaceLoad, old: true, wantErr: "set inference.adapters.inplace to auto or reload"},
	} {
		t.Run(fmt.Sprintf("%s/old=%v/silent=%v", tc.mode, tc.old, tc.silent), func(t *testing.T) {
			f, s := newFakeVLLM(t)
			f.old, f.silent = tc.old, tc.silent
			fleet := testFleet(t, FleetOptions{Inplace: tc.mode}, s.URL)
			ctx := context.Background()
			var err error
			for _, path := range []string{"/a/1", "/a/2", "/a/3"} {
				if err = fleet.LoadEverywhere(ctx, "o3-run", path); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrAdapterExists) {
					t.Fatalf("LoadEverywhere()=%v, want ErrAdapterExists saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The name serves the last step's adapter.
			if got, want := f.root("o3-run"), "/a/3"; got != want {
				t.Fatalf("root=%q, want %q", got, want)
			}
			unloads := 0
			for _, e := range f.log() {
				if strings.HasPrefix(e, "unload ") {
					unloads++
				}
			}
			if unloads != tc.unloads {
				t.Errorf("unloads=%d, want %d (log %v)", unloads, tc.unloads, f.log())
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if !slices.Equal(f.inplace, tc.inplaces) {
				t.Errorf("load_inplace sent=%v, want %v", f.inplace, tc.inplaces)
			}
		})
	}
}

func TestFleet_LoadRetriesNotFound(t *testing.T) {
	f, s := newFakeVLLM(t)
	f.notFound = 2
	reg := NewFleetMetrics(prometheus.NewRegistry())
	fleet := testFleet(t, FleetOptions{Metrics: reg, Run: "r"}, s.URL)
	if err := fleet.LoadEverywhere(context.Background(), "r-step-0001", "/a/1"); err != nil {
		t.Fatal(err)
	}
	if !f.has("r-step-0001") {
		t.Fatal("not loaded")
	}
	ep := s.URL + "/v1"
	for outcome, want := range map[string]float64{LoadNotFound: 2, LoadLoaded: 1, LoadFailed: 0} {
		if got := metricValue(t, fleetLoads(reg, "r", ep, outcome)); got != want {
			t.Errorf("%s loads=%v, want %v", outcome, got, want)
		}
	}

	// Past the retries, the load fails with the sentinel.
	f.set(func(f *fakeVLLM) { f.notFound = 10 })
	err := fleet.LoadEverywhere(context.Background(), "r-step-0002", "/a/2")
	if !errors.Is(err, ErrAdapterPathNotFound) {
		t.Fatalf("LoadEverywhere()=%v, want ErrAdapterPathNotFound", err)
	}
	// It says what was loaded where once, not once per layer.
	if msg := err.Error(); strings.Count(msg, "load adapter r-step-0002") != 1 || !strings.Contains(msg, s.URL) {
		t.Errorf("error %q: want \"load adapter r-step-0002\" once and the endpoint", msg)
	}
}

func TestFleet_LoadDrainsFailingEndpoint(t *testing.T) {
	f1, s1 := newFakeVLLM(t)
	bad := staticServer(t, http.StatusInternalServerError, "application/json",
		`{"error":{"message":"CUDA error: out of memory","type":"InternalServerError","param":null,"code":500}}`)
	fleet := testFleet(t, FleetOptions{}, s1.URL, bad.URL)
	if err := fleet.LoadEverywhere(context.Background(), "r-step-0002", "/a/2"); err != nil {
		t.Fatalf("LoadEverywhere()=%v; want success on the live endpoint", err)
	}
	if !f1.has("r-step-0002") {
		t.Fatal("healthy endpoint did not load the adapter")
	}
	if got, want := fleet.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
}

// TestFleet_LoadDrainsRefusingEndpoint: an endpoint that refuses (400) an
// adapter another endpoint loaded is drained, not the run's failure; an
// adapter every endpoint refuses fails the load, naming each.
func TestFleet_LoadDrainsRefusingEndpoint(t *testing.T) {
	f1, s1 := newFakeVLLM(t)
	refusing := staticServer(t, http.StatusBadRequest, "application/json",
		`{"error":{"message":"max number of LoRAs reached","type":"BadRequestError","param":null,"code":400}}`)
	fleet := testFleet(t, FleetOptions{}, s1.URL, refusing.URL)
	if err := fleet.LoadEverywhere(context.Background(), "r-step-0001", "/a/1"); err != nil {
		t.Fatalf("LoadEverywhere()=%v; want success on the endpoint that took it", err)
	}
	if !f1.has("r-step-0001") {
		t.Fatal("the other endpoint did not load the adapter")
	}
	if got, want := fleet.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v (the refusing endpoint drained)", got, want)
	}

	refusing2 := staticServer(t, http.StatusBadRequest, "application/json",
		`{"error":{"message":"invalid adapter","type":"BadRequestError","param":null,"code":400}}`)
	all := testFleet(t, FleetOptions{}, refusing.URL, refusing2.URL)
	err := all.LoadEverywhere(context.Background(), "r-step-0001", "/a/1")
	if err == nil || !strings.Contains(err.Error(), refusing.URL) || !strings.Contains(err.Error(), refusing2.URL) {
		t.Fatalf("LoadEverywhere() refused everywhere = %v, want an error naming both endpoints", err)
	}
	if got, want := all.Live(), []bool{true, true}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v: an adapter every endpoint refuses drains none", got, want)
	}
}

func TestFleet_Healthy(t *testing.T) {
	_, ok := newFakeVLLM(t)
	sick, sickSrv := newFakeVLLM(t)
	sick.health = http.StatusServiceUnavailable
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()

	fleet := testFleet(t, FleetOptions{}, ok.URL, sickSrv.URL, gone)
	errs := fleet.Healthy(context.Background())
	if got, want := len(errs), 3; got != want {
		t.Fatalf("len(Healthy())=%d, want %d", got, want)
	}
	if errs[0] != nil {
		t.Fatalf("healthy endpoint: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "503") || !strings.Contains(errs[1].Error(), sickSrv.URL) {
		t.Fatalf("sick endpoint: %v, want a 503 naming it", errs[1])
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), gone) {
		t.Fatalf("gone endpoint: %v, want an error naming %s", errs[2], gone)
	}
	// A tick drains both failing endpoints.
	fleet.Tick(context.Background())
	if got, want := fleet.Live(), []bool{true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("Live() after Tick=%v, want %v", got, want)
	}
}

func TestFleet_TickKeepsServerWithoutHealthRoute(t *testing.T) {
	// An OpenAI-compatible server with no /health (404) is not drained by
	// the probe; one whose /health answers 503 is.
	a, sa := newFakeVLLM(t)
	a.health = http.StatusNotFound
	b, sb := newFakeVLLM(t)
	b.health = http.StatusServiceUnavailable
	fleet := testFleet(t, FleetOptions{}, sa.URL, sb.URL)
	fleet.Tick(context.Background())
	if got, want := fleet.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
}

func TestFleet_Probe(t *testing.T) {
	_, ok := newFakeVLLM(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	html := staticServer(t, http.StatusOK, "text/html", "<html>dashboard</html>")
	ctx := context.Background()

	// A replica down at start is drained; the run starts on the other.
	f := testFleet(t, FleetOptions{}, ok.URL, gone)
	if err := f.Probe(ctx); err != nil {
		t.Fatalf("Probe()=%v, want nil with one replica answering", err)
	}
	if got, want := f.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	// One answering 500 to everything is drained too.
	failing := staticServer(t, http.StatusInternalServerError, "application/json",
		`{"error":{"message":"engine dead","type":"InternalServerError","param":null,"code":500}}`)
	f = testFleet(t, FleetOptions{}, failing.URL, ok.URL)
	if err := f.Probe(ctx); err != nil {
		t.Fatalf("Probe()=%v, want nil with one replica answering", err)
	}
	if got, want := f.Live(), []bool{false, true}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	// None answering: an error naming it.
	f = testFleet(t, FleetOptions{}, gone)
	if err := f.Probe(ctx); err == nil || !strings.Contains(err.Error(), gone) {
		t.Fatalf("Probe()=%v, want an error naming %s", err, gone)
	}
	// A server that answers but is not OpenAI-compatible is a config
	// error, even with another replica fine.
	f = testFleet(t, FleetOptions{}, ok.URL, html.URL)
	if err := f.Probe(ctx); err == nil || !strings.Contains(err.Error(), "expected an OpenAI-compatible /v1/models JSON list") {
		t.Fatalf("Probe()=%v, want the wrong server named", err)
	}
}
