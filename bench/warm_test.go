package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// countingFake serves LLMHandler and records, for the chat completions
// it answers, how many there were and from how many client connections
// (remote addresses).
type countingFake struct {
	mu    sync.Mutex
	calls int
	conns map[string]bool
}

func (f *countingFake) counts() (calls, conns int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, len(f.conns)
}

func startCountingFake(t *testing.T, service time.Duration) (*countingFake, string) {
	t.Helper()
	f := &countingFake{conns: map[string]bool{}}
	h := LLMHandler(service)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			f.mu.Lock()
			f.calls++
			f.conns[r.RemoteAddr] = true
			f.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return f, srv.URL + "/v1"
}

// TestMeasureWarm: a warm measurement makes one untimed call per agent
// first and then its measured calls on the same connections: the server
// answers the extra calls, on one connection per agent, and the
// measurement counts only its own calls.
func TestMeasureWarm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const service = 50 * time.Millisecond // long enough for all 20 agents to wait at once
	for _, tc := range []struct {
		name    string
		measure func(context.Context, RolloutOptions) (Throughput, error)
	}{{"rollout", MeasureRollout}, {"floor", MeasureFloor}} {
		for _, warm := range []bool{false, true} {
			f, base := startCountingFake(t, service)
			o := RolloutOptions{BaseURL: base, Service: service, Agents: 20, Rounds: 3, Warm: warm}
			tp, err := tc.measure(ctx, o)
			if err != nil {
				t.Fatalf("%s warm=%v: %v", tc.name, warm, err)
			}
			wantCalls := 60
			if warm {
				wantCalls += 20 // one untimed call per agent
			}
			calls, conns := f.counts()
			if tp.Calls != 60 || tp.Warm != warm || calls != wantCalls || conns != 20 {
				t.Fatalf("%s warm=%v: measured %d calls (warm %v); server answered %d calls on %d connections, want 60 measured, %d answered, 20 connections",
					tc.name, warm, tp.Calls, tp.Warm, calls, conns, wantCalls)
			}
			if tp.SysPerCall < 0 || tp.SysPerCall > tp.CPUPerCall { // the split is sampled at clock ticks: 0 can happen
				t.Fatalf("%s warm=%v: kernel CPU per call %v of %v in all", tc.name, warm, tp.SysPerCall, tp.CPUPerCall)
			}
		}
	}
}
