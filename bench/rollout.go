package bench

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/rollout"
)

// Throughput is one rollout measurement: Agents philosophers deciding at
// once (Agents/N episodes of N philosophers, Rounds rounds each) against
// a server with a fixed service time.
type Throughput struct {
	Agents, N, Rounds, Episodes int
	Calls, Errored              int
	Wall, Ideal                 time.Duration
	CPUPerCall                  time.Duration // whole process, user+system
	AllocsPerCall, BytesPerCall float64
	PeakRSS                     int64 // bytes; 0 when unknown
	TimeWait                    int   // TIME_WAIT connections to the server after the run; -1 unknown
}

// Efficiency is ideal/actual: 1 means the run took exactly its critical
// path (Rounds service times).
func (t Throughput) Efficiency() float64 {
	if t.Wall <= 0 {
		return 0
	}
	return float64(t.Ideal) / float64(t.Wall)
}

// RolloutOptions describe a rollout measurement.
type RolloutOptions struct {
	BaseURL string        // the fake server, with /v1
	Service time.Duration // its service time, for the ideal
	Agents  int           // philosophers deciding at once
	N       int           // philosophers per table (default 5)
	Rounds  int           // rounds per episode (default 5)
}

// MeasureRollout plays Agents/N simultaneous episodes at once against the
// server, as `grpo eval` does (one HTTP client sized to the concurrency,
// one global limiter), and measures the client process.
func MeasureRollout(ctx context.Context, o RolloutOptions) (Throughput, error) {
	if o.N == 0 {
		o.N = 5
	}
	if o.Rounds == 0 {
		o.Rounds = 5
	}
	if o.Agents < o.N {
		return Throughput{}, fmt.Errorf("rollout bench: %d agents is fewer than one table of %d", o.Agents, o.N)
	}
	episodes := o.Agents / o.N
	agents := episodes * o.N
	hc := httpx.NewHTTPClient(agents)
	defer hc.CloseIdleConnections()
	client := inference.NewChatClient(o.BaseURL, inference.ChatOptions{HTTPClient: hc})
	runner := &rollout.Runner{Client: client, Limit: rollout.NewLimiter(agents)}
	specs := make([]rollout.EpisodeSpec, episodes)
	for i := range specs {
		env := rollout.DefaultEnvConfig()
		env.N, env.Rounds, env.Seed = o.N, o.Rounds, int64(i+1)
		specs[i] = rollout.EpisodeSpec{ID: strconv.Itoa(i), Model: "m", Env: env, Reward: rollout.DefaultRewardConfig(),
			Sampling: rollout.Sampling{Temperature: 1}, SampleSeed: int64(i),
			NoTranscripts: true} // as `grpo eval` without --out
	}
	port := urlPort(o.BaseURL)
	tw0 := timeWait(port) // earlier runs' closed connections linger 60 s
	runtime.GC()
	resetPeakRSS()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, t0 := cpuTime(), time.Now()
	eps := runner.RunAll(ctx, specs, episodes, nil)
	wall, cpu := time.Since(t0), cpuTime()-cpu0
	runtime.ReadMemStats(&m1)
	if err := ctx.Err(); err != nil {
		return Throughput{}, err
	}
	t := Throughput{Agents: agents, N: o.N, Rounds: o.Rounds, Episodes: episodes, Wall: wall,
		Ideal: time.Duration(o.Rounds) * o.Service, PeakRSS: peakRSS(), TimeWait: -1}
	for _, ep := range eps {
		t.Calls += ep.Metrics.LLMCalls
		if ep.Errored {
			t.Errored++
		}
	}
	if t.Errored > 0 {
		return t, fmt.Errorf("rollout bench: %d of %d episodes failed; first: %s", t.Errored, episodes, firstError(eps))
	}
	if t.Calls > 0 {
		t.CPUPerCall = cpu / time.Duration(t.Calls)
		t.AllocsPerCall = float64(m1.Mallocs-m0.Mallocs) / float64(t.Calls)
		t.BytesPerCall = float64(m1.TotalAlloc-m0.TotalAlloc) / float64(t.Calls)
	}
	if tw := timeWait(port); port > 0 && tw >= 0 {
		t.TimeWait = max(0, tw-tw0)
	}
	return t, nil
}

func firstError(eps []rollout.Episode) string {
	for _, ep := range eps {
		if ep.Errored {
			return ep.Error
		}
	}
	return ""
}

func urlPort(base string) int {
	u, err := url.Parse(base)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}
