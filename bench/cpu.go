package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
)

// cannedTransport answers every request with the fake completion without
// a network: what remains is the orchestrator's own work per call.
type cannedTransport struct{ body []byte }

func (c cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		ContentLength: int64(len(c.body)),
		Body:          io.NopCloser(bytes.NewReader(c.body)),
		Request:       r,
	}, nil
}

// cpuRow measures CPU and allocations per LLM call with the server
// replaced by an in-process transport: request building and encoding,
// decoding, the environment and the bookkeeping of an episode.
func cpuRow(ctx context.Context, o Options) ([]Result, error) {
	episodes := 400
	if o.Quick {
		episodes = 8
	}
	hc := &http.Client{Transport: cannedTransport{body: []byte(completion)}}
	r := &rollout.Runner{Client: inference.NewChatClient("http://fake/v1", inference.ChatOptions{HTTPClient: hc}), Limit: rollout.NewLimiter(64)}
	specs := make([]rollout.EpisodeSpec, episodes)
	for i := range specs {
		env := rollout.DefaultEnvConfig()
		env.Seed = int64(i + 1)
		specs[i] = rollout.EpisodeSpec{Model: "m", Env: env, Reward: rollout.DefaultRewardConfig(), Sampling: rollout.Sampling{Temperature: 1}}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, t0 := cpuTime(), time.Now()
	eps := r.RunAll(ctx, specs, 13, nil)
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	runtime.ReadMemStats(&m1)
	calls := 0
	for _, ep := range eps {
		if ep.Errored {
			return nil, fmt.Errorf("episode failed: %s", ep.Error)
		}
		calls += ep.Metrics.LLMCalls
	}
	c := fmt.Sprintf("in-process transport, %d calls", calls)
	return []Result{
		{"cpu", c, "cpu per call", float64(cpu.Nanoseconds()) / float64(calls) / 1e3, "us"},
		{"cpu", c, "wall per call", float64(wall.Nanoseconds()) / float64(calls) / 1e3, "us"},
		{"cpu", c, "allocs per call", float64(m1.Mallocs-m0.Mallocs) / float64(calls), ""},
		{"cpu", c, "bytes per call", float64(m1.TotalAlloc-m0.TotalAlloc) / float64(calls), "B"},
	}, nil
}

// memoryRow measures the memory an in-flight episode holds: heap and
// goroutine stacks at their highest while every episode waits on the
// server, over the level before, divided by the episodes.
func memoryRow(ctx context.Context, o Options, llm string) ([]Result, error) {
	agents := 2000
	if o.Quick {
		agents = 10
	}
	var peak atomic.Uint64
	samples := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
	read := func() uint64 {
		metrics.Read(samples)
		return samples[0].Value.Uint64() + samples[1].Value.Uint64()
	}
	runtime.GC()
	base := read()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	t, err := MeasureRollout(ctx, RolloutOptions{BaseURL: llm, Service: o.Service, Agents: agents})
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	per := float64(peak.Load()-min(base, peak.Load())) / float64(t.Episodes)
	c := fmt.Sprintf("%d episodes in flight (n=%d, %d rounds)", t.Episodes, t.N, t.Rounds)
	return []Result{
		{"memory", c, "heap+stacks per episode", per / 1024, "KB"},
		{"memory", c, "peak rss", float64(t.PeakRSS) / (1 << 20), "MB"},
	}, nil
}
