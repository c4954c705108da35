package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
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
	SysPerCall                  time.Duration // the part of CPUPerCall spent in the kernel
	ServerCPUPerCall            time.Duration // the fake server's, when it runs as `grpo bench serve-fake`; 0 unknown
	AllocsPerCall, BytesPerCall float64
	PeakRSS                     int64 // bytes; 0 when unknown
	TimeWait                    int   // TIME_WAIT connections to the server after the run; -1 unknown
	Warm                        bool  // measured with a connection per agent already open (RolloutOptions.Warm)
	Cores                       int   // the machine's CPUs, shared by client and server; 0 unknown
}

// Efficiency is ideal/actual: 1 means the run took exactly its critical
// path (Rounds service times).
func (t Throughput) Efficiency() float64 {
	if t.Wall <= 0 {
		return 0
	}
	return float64(t.Ideal) / float64(t.Wall)
}

// CPUCeiling is the highest ideal/actual that the CPU the calls took
// allows on the machine's cores, which the client and a fake server in a
// child process share: the run cannot be shorter than all its calls'
// CPU, the client's and the server's (ServerCPUPerCall; with an
// in-process server it is in CPUPerCall already), spread over every
// core, nor than its ideal. 0 when unknown.
func (t Throughput) CPUCeiling() float64 {
	if t.Cores <= 0 || t.Calls <= 0 || t.Ideal <= 0 {
		return 0
	}
	perCall := t.CPUPerCall + t.ServerCPUPerCall
	if perCall <= 0 {
		return 0
	}
	need := time.Duration(t.Calls) * perCall / time.Duration(t.Cores)
	return float64(t.Ideal) / float64(max(t.Ideal, need))
}

// RolloutOptions describe a rollout measurement.
type RolloutOptions struct {
	BaseURL string        // the fake server, with /v1
	Service time.Duration // its service time, for the ideal
	Agents  int           // philosophers deciding at once
	N       int           // philosophers per table (default 5)
	Rounds  int           // rounds per episode (default 5)
	// Warm opens a connection per agent before the measurement starts,
	// with one untimed call each, as a run's steps after its first find
	// them: the measured calls then dial nothing.
	Warm bool
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
	hc := httpx.NewHTTPClient(agents, nil)
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
	if o.Warm {
		// One round of every episode, untimed: each agent's call leaves
		// its connection in the pool, which keeps one per agent.
		warm := make([]rollout.EpisodeSpec, len(specs))
		for i, s := range specs {
			s.Env.Rounds = 1
			warm[i] = s
		}
		eps := runner.RunAll(ctx, warm, episodes, nil)
		if err := ctx.Err(); err != nil {
			return Throughput{}, err
		}
		if e := firstError(eps); e != "" {
			return Throughput{}, fmt.Errorf("rollout bench: opening the connections: %s", e)
		}
	}
	m := startMeter(o.BaseURL)
	eps := runner.RunAll(ctx, specs, episodes, nil)
	m.stop()
	if err := ctx.Err(); err != nil {
		return Throughput{}, err
	}
	t := Throughput{Agents: agents, N: o.N, Rounds: o.Rounds, Episodes: episodes,
		Ideal: time.Duration(o.Rounds) * o.Service, Warm: o.Warm}
	for _, ep := range eps {
		t.Calls += ep.Metrics.LLMCalls
		if ep.Errored {
			t.Errored++
		}
	}
	m.fill(&t)
	if t.Errored > 0 {
		return t, fmt.Errorf("rollout bench: %d of %d episodes failed; first: %s", t.Errored, episodes, firstError(eps))
	}
	return t, nil
}

// meter measures this process over a run: wall and CPU time,
// allocations, peak RSS, and the connections to the server's port that
// entered TIME_WAIT.
type meter struct {
	port, tw0  int
	m0, m1     runtime.MemStats
	cpu0, cpu  time.Duration
	sys0, sys  time.Duration // the kernel's part of cpu
	t0         time.Time
	wall       time.Duration
	base       string
	srv0, srv  time.Duration // the server's CPU time at the start, and over the run
	srvUnknown bool
}

// startMeter starts measuring a run against the server at baseURL.
func startMeter(baseURL string) *meter {
	m := &meter{port: urlPort(baseURL), base: baseURL}
	m.tw0 = timeWait(m.port) // earlier runs' closed connections linger 60 s
	var ok bool
	m.srv0, ok = serverCPU(baseURL) // before the process is measured
	m.srvUnknown = !ok
	// Collect and give the freed memory back to the kernel first, so
	// that the peak starts from what is live now, not from a resident
	// heap an earlier, larger row left behind.
	debug.FreeOSMemory()
	resetPeakRSS()
	runtime.ReadMemStats(&m.m0)
	user, sys := cpuTimes()
	m.cpu0, m.sys0, m.t0 = user+sys, sys, time.Now()
	return m
}

// stop ends the measurement, as the run ends.
func (m *meter) stop() {
	m.wall = time.Since(m.t0)
	user, sys := cpuTimes()
	m.cpu, m.sys = user+sys-m.cpu0, sys-m.sys0
	runtime.ReadMemStats(&m.m1)
	if srv, ok := serverCPU(m.base); ok && !m.srvUnknown {
		m.srv = srv - m.srv0
	} else {
		m.srvUnknown = true
	}
}

// serverCPU asks the server at baseURL (with or without /v1) for its
// process's CPU time: `grpo bench serve-fake` answers GET /bench/cpu; any
// other server does not, and ok is false.
func serverCPU(baseURL string) (time.Duration, bool) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" {
		return 0, false
	}
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(u.Scheme + "://" + u.Host + "/bench/cpu")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || ns < 0 {
		return 0, false
	}
	return time.Duration(ns), true
}

// fill sets t's measured figures, per call of t.Calls.
func (m *meter) fill(t *Throughput) {
	t.Wall, t.PeakRSS, t.TimeWait, t.Cores = m.wall, peakRSS(), -1, runtime.NumCPU()
	if t.Calls > 0 {
		t.CPUPerCall = m.cpu / time.Duration(t.Calls)
		t.SysPerCall = m.sys / time.Duration(t.Calls)
		t.AllocsPerCall = float64(m.m1.Mallocs-m.m0.Mallocs) / float64(t.Calls)
		t.BytesPerCall = float64(m.m1.TotalAlloc-m.m0.TotalAlloc) / float64(t.Calls)
		if !m.srvUnknown {
			t.ServerCPUPerCall = m.srv / time.Duration(t.Calls)
		}
	}
	if tw := timeWait(m.port); m.port > 0 && tw >= 0 {
		t.TimeWait = max(0, tw-m.tw0)
	}
}

// firstError is the error of the first episode that failed, or "".
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
