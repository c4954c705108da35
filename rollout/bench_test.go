package rollout_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
)

// cannedTransport is an in-process fake server: it drains the request and
// answers a fixed completion, so the benchmark measures only the
// orchestrator's side of a call (building and encoding the request,
// decoding the answer, keeping the raw choice, the environment).
type cannedTransport struct{ body []byte }

func (c cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return &http.Response{
		StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"application/json"}},
		Body:    io.NopCloser(bytes.NewReader(c.body)),
		Request: r,
	}, nil
}

const benchCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"think","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:151657","logprob":-0.1,"bytes":[60],"top_logprobs":[]},{"token":"token_id:5","logprob":-0.2,"bytes":[116],"top_logprobs":[]},{"token":"token_id:151658","logprob":-0.01,"bytes":[62],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":700,"completion_tokens":3,"total_tokens":703}}`

// BenchmarkEpisodeCalls reports the orchestrator's CPU time and allocations
// per LLM call for n=5, 5-round simultaneous episodes (25 calls each).
func BenchmarkEpisodeCalls(b *testing.B) {
	hc := &http.Client{Transport: cannedTransport{body: []byte(benchCompletion)}}
	r := &rollout.Runner{Client: inference.NewChatClient("http://fake/v1", inference.ChatOptions{HTTPClient: hc}), Limit: rollout.NewLimiter(64)}
	s := rollout.EpisodeSpec{Model: "m", Env: rollout.DefaultEnvConfig(), Reward: rollout.DefaultRewardConfig(), Sampling: rollout.Sampling{Temperature: 1}}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	calls := 0
	cpu0 := cpuTime()
	start := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		ep := r.Run(context.Background(), s)
		if ep.Errored {
			b.Fatal(ep.Error)
		}
		calls += ep.Metrics.LLMCalls
	}
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	runtime.ReadMemStats(&ms1)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(calls), "cpu-ns/call")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(calls), "ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(calls), "allocs/call")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(calls), "B/call")
}

// cpuTime is the process's user+system CPU time: with the fake server in
// process, all of it is the orchestrator's (plus the GC's) work.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
