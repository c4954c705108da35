package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/refmodel"
)

// faultyEndpoint serves a reference backend's inference API on a fixed
// loopback address, failing a fraction of the requests (every path) by a
// fixed random sequence — a 500 with an OpenAI error body, or a dropped
// connection — and going away entirely (its listener closed, connections
// refused) for an outage on demand.
type faultyEndpoint struct {
	t    *testing.T
	h    http.Handler
	addr string

	mu       sync.Mutex
	srv      *http.Server
	rng      *rand.Rand
	rate     float64 // share of requests failed
	reset    bool    // fail by dropping the connection, not by a 500
	requests int     // requests received while up
	faults   int     // of which failed on purpose
	chats    int     // chat completions answered

	outageAt  int           // the chat completion after which the outage begins (0: none)
	outageFor time.Duration // how long it lasts
	down      chan error    // made when the outage begins; its result when it ends
}

func newFaultyEndpoint(t *testing.T, h http.Handler, rate float64, reset bool, seed uint64) *faultyEndpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyEndpoint{t: t, h: h, addr: ln.Addr().String(), rng: rand.New(rand.NewPCG(seed, seed)), rate: rate, reset: reset}
	f.serve(ln)
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.srv != nil {
			f.srv.Close()
		}
	})
	return f
}

func (f *faultyEndpoint) URL() string { return "http://" + f.addr + "/v1" }

func (f *faultyEndpoint) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(f.handle)}
	f.srv = srv
	go srv.Serve(ln)
}

func (f *faultyEndpoint) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	fail := f.rng.Float64() < f.rate
	if fail {
		f.faults++
	}
	reset := f.reset
	f.mu.Unlock()
	switch {
	case fail && reset:
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	case fail:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"error":{"message":"injected fault","type":"InternalServerError","code":500}}`))
		return
	}
	f.h.ServeHTTP(w, r)
	if r.URL.Path == "/v1/chat/completions" {
		f.mu.Lock()
		f.chats++
		begin := f.chats == f.outageAt
		f.mu.Unlock()
		if begin {
			f.outage()
		}
	}
}

// planOutage makes the outage begin after the at-th chat completion and
// last d. The server is already serving, so the plan is set under the lock
// its handlers read it with.
func (f *faultyEndpoint) planOutage(at int, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outageAt, f.outageFor = at, d
}

// outage closes the server (connections are refused) and serves again on
// the same address after outageFor. It returns at once; f.down tells
// when the server is back.
func (f *faultyEndpoint) outage() {
	done := make(chan error, 1)
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.down = done
	d := f.outageFor
	f.mu.Unlock()
	go func() {
		srv.Close()
		time.Sleep(d)
		ln, err := net.Listen("tcp", f.addr)
		if err != nil {
			done <- fmt.Errorf("serve again on %s after the outage: %w", f.addr, err)
			return
		}
		f.mu.Lock()
		f.serve(ln)
		f.mu.Unlock()
		done <- nil
	}()
}

// waitOutage waits for the end of the outage, failing the test when none
// began.
func (f *faultyEndpoint) waitOutage(what string) {
	f.t.Helper()
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down == nil {
		f.t.Fatalf("%s ended before the outage began", what)
	}
	if err := <-down; err != nil {
		f.t.Fatal(err)
	}
}

func (f *faultyEndpoint) counts() (requests, faults, chats int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests, f.faults, f.chats
}

// refBackend is a reference backend on a fresh data directory.
func refBackend(t *testing.T, seed int64) *refmodel.Backend {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// evalBinary runs the real binary's 'grpo eval --json' against url and
// returns its stdout.
func evalBinary(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, append([]string{"eval", "--base-url", url, "--model", refmodel.BaseModelName, "--json"}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("grpo eval %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if strings.Contains(stderr.String(), "WARNING") {
		t.Fatalf("grpo eval %s warned:\n%s", strings.Join(args, " "), stderr.String())
	}
	return stdout.String()
}

// TestEvalExactUnderScatteredFaults (issue 13, the real binary): 'grpo
// eval --base-url' against an endpoint failing 20% or 50% of all its
// requests (500s, or dropped connections), by a fixed random sequence,
// prints exactly the JSON it prints without faults: stochastic sampling
// (temperature 1, per-call seeds) and a deterministic policy (temperature
// 0). No episode errors (the binary would warn, and the figures differ):
// every failed request is sent again within the retry budget.
func TestEvalExactUnderScatteredFaults(t *testing.T) {
	bin := buildBinary(t)
	b := refBackend(t, 1)
	for _, policy := range []struct {
		name string
		args []string
	}{
		{"stochastic", []string{"--temperature", "1", "--seed", "7", "--episodes", "8", "--n", "5", "--deadlock-patience", "2"}},
		{"deterministic", []string{"--temperature", "0", "--seed", "7", "--episodes", "6", "--n", "5", "--deadlock-patience", "3"}},
	} {
		clean := newFaultyEndpoint(t, b.InferenceHandler(), 0, false, 1)
		want := evalBinary(t, bin, clean.URL(), policy.args...)
		if !strings.Contains(want, `"errored":0`) || !strings.Contains(want, `"episodes":`) {
			t.Fatalf("%s: fault-free evaluation: %s", policy.name, want)
		}
		for _, fault := range []struct {
			rate  float64
			reset bool
		}{{0.5, false}, {0.5, true}, {0.2, false}} {
			if policy.name == "stochastic" && fault.rate != 0.5 {
				continue
			}
			name := fmt.Sprintf("%s/%.0f%% %s", policy.name, 100*fault.rate, map[bool]string{false: "500s", true: "resets"}[fault.reset])
			f := newFaultyEndpoint(t, b.InferenceHandler(), fault.rate, fault.reset, 42)
			got := evalBinary(t, bin, f.URL(), policy.args...)
			requests, faults, _ := f.counts()
			t.Logf("%s: %d faults injected over %d requests", name, faults, requests)
			if faults < requests/10 {
				t.Fatalf("%s: only %d faults over %d requests", name, faults, requests)
			}
			if got != want {
				t.Errorf("%s: figures differ from the fault-free evaluation:\n got %s\nwant %s", name, got, want)
			}
		}
	}
}

// TestEvalRidesOutOutage (issue 13, the real binary): the only endpoint
// of 'grpo eval' goes away (connections refused) for 8 s mid-evaluation;
// the evaluation waits, finishes, and prints the fault-free figures.
func TestEvalRidesOutOutage(t *testing.T) {
	bin := buildBinary(t)
	b := refBackend(t, 1)
	args := []string{"--temperature", "1", "--seed", "3", "--episodes", "4", "--n", "5", "--concurrency", "4"}
	want := evalBinary(t, bin, newFaultyEndpoint(t, b.InferenceHandler(), 0, false, 1).URL(), args...)

	f := newFaultyEndpoint(t, b.InferenceHandler(), 0, false, 1)
	f.planOutage(10, 8*time.Second)
	got := evalBinary(t, bin, f.URL(), args...)
	f.waitOutage("the evaluation")
	if _, _, chats := f.counts(); chats <= 10 {
		t.Fatalf("no chat completion after the outage (%d in all)", chats)
	}
	if got != want {
		t.Fatalf("figures differ from the fault-free evaluation:\n got %s\nwant %s", got, want)
	}
}

// TestRunRidesOutOutage (issue 13, the real binary): the only inference
// endpoint of 'grpo run' goes away for 8 s once the first adapter is
// served; the run waits, succeeds, and its steps equal those of a run
// without the outage. So do they when the endpoint fails 50% of all its
// requests (chat, adapter loads, health, models) with 500s.
func TestRunRidesOutOutage(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	play := func(name string, outage bool, rate float64) string {
		b := refBackend(t, 1)
		trainer := httptest.NewServer(b.TrainerHandler())
		t.Cleanup(trainer.Close)
		f := newFaultyEndpoint(t, b.InferenceHandler(), rate, false, 42)
		if outage {
			// Step 0's validation takes 4 episodes of at most 5 rounds x
			// 5 calls; by 150 chats the run is past it, sampling step 1
			// or later.
			f.planOutage(150, 8*time.Second)
		}
		cfg := filepath.Join(dir, name+".yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: o, steps: 3, seed: 4}
validation: {episodes: 4}
inference: {model: %s, endpoints: [{url: %s}]}
trainer: {kind: jobs, url: %s, base_model: %s, hyperparameters: {learning_rate: %v}}
`, refmodel.BaseModelName, f.URL(), trainer.URL, refmodel.BaseModelName, refmodel.DefaultLearningRate)), 0o644)
		db := filepath.Join(dir, name+".db")
		out, err := exec.Command(bin, "run", "--config", cfg, "--db", db, "--quiet").CombinedOutput()
		if err != nil {
			t.Fatalf("%s: grpo run: %v\n%s", name, err, out)
		}
		if outage {
			f.waitOutage(name + " run")
			if _, _, chats := f.counts(); chats <= 150 {
				t.Fatalf("%s: no chat completion after the outage", name)
			}
		}
		if rate > 0 {
			requests, faults, _ := f.counts()
			t.Logf("%s: %d faults injected over %d requests", name, faults, requests)
			if faults < requests/4 {
				t.Fatalf("%s: only %d faults over %d requests", name, faults, requests)
			}
		}
		return results(t, bin, db, "o")
	}
	want := play("clean", false, 0)
	for _, tt := range []struct {
		name   string
		outage bool
		rate   float64
	}{{"outage", true, 0}, {"faults50", false, 0.5}} {
		got := play(tt.name, tt.outage, tt.rate)
		if !strings.HasPrefix(got, "succeeded\n") || strings.Count(got, "\n") != 5 {
			t.Fatalf("run %s: %s", tt.name, got)
		}
		if got != want {
			t.Fatalf("run %s: steps differ from the run without faults:\n got %s\nwant %s", tt.name, got, want)
		}
	}
}
