package inference

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/quote"
)

// vLLM's back-pressure gauges (DESIGN §6). vLLM before v0.10 called the KV
// cache gauge gpu_cache_usage_perc.
const (
	metricRunning    = "vllm:num_requests_running"
	metricWaiting    = "vllm:num_requests_waiting"
	metricKVCache    = "vllm:kv_cache_usage_perc"
	metricKVCacheOld = "vllm:gpu_cache_usage_perc"
)

// QueueStats is an endpoint's load as its /metrics reports it.
type QueueStats struct {
	Running      float64 // requests in the running batch, summed over engines
	Waiting      float64 // requests queued, summed over engines
	KVCacheUsage float64 // fraction of KV cache blocks in use, 0..1; the fullest engine's
}

// Load reads the endpoint's queue from GET /metrics on the server root.
// Nothing calls it yet: the fleet work (adapting each endpoint's
// concurrency to its queue) will.
func (c *AdminClient) Load(ctx context.Context) (QueueStats, error) {
	a, err := c.send(ctx, &httpx.Request{
		Method: http.MethodGet, URL: c.root + "/metrics",
		Header: http.Header{"Accept": {"text/plain;version=0.0.4"}},
	}, true)
	if err == nil && a.status != http.StatusOK {
		err = a.adminError(nil)
	}
	if err != nil {
		return QueueStats{}, fmt.Errorf("read load: %w", err)
	}
	s, err := parseQueueStats(a.body)
	if err != nil {
		return QueueStats{}, fmt.Errorf("read load: %s: %w", a.url, err)
	}
	return s, nil
}

// parseQueueStats reads vLLM's gauges from a Prometheus text exposition.
// Running and waiting are summed over label sets (one per engine under
// data parallelism); KV cache usage is a fraction, so the highest is kept.
func parseQueueStats(body []byte) (QueueStats, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return QueueStats{}, fmt.Errorf("not Prometheus text format (%v): %s", err, quote.Body(body))
	}
	running, okR := sum(families[metricRunning])
	waiting, okW := sum(families[metricWaiting])
	if !okR || !okW {
		return QueueStats{}, fmt.Errorf("no %s or %s gauge; is this a vLLM server?", metricRunning, metricWaiting)
	}
	kv, ok := highest(families[metricKVCache])
	if !ok {
		kv, _ = highest(families[metricKVCacheOld])
	}
	return QueueStats{Running: running, Waiting: waiting, KVCacheUsage: kv}, nil
}

// sum adds a family's samples; ok is false if it has none.
func sum(mf *dto.MetricFamily) (total float64, ok bool) {
	for _, m := range mf.GetMetric() {
		if v, has := value(m); has {
			total += v
			ok = true
		}
	}
	return total, ok
}

// highest is the largest of a family's samples; ok is false if it has none.
func highest(mf *dto.MetricFamily) (hi float64, ok bool) {
	for _, m := range mf.GetMetric() {
		if v, has := value(m); has && (!ok || v > hi) {
			hi, ok = v, true
		}
	}
	return hi, ok
}

// value reads a gauge, counter or untyped sample.
func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	}
	return 0, false
}

// aimd adapts an endpoint's concurrency limit to its vLLM queue, additive
// increase, multiplicative decrease: while requests queue (any waiting, or
// the KV cache at or above kvHigh) the limit halves, down to min; while
// none queue and the endpoint used its whole limit since the last reading
// it grows by step, up to max. An endpoint that is not busy keeps its
// limit: nothing was learnt about more.
type aimd struct {
	min, max, step int
	kvHigh         float64
}

// newAIMD bounds the limits of n endpoints sharing total requests in
// flight: each may grow to total, and grows by total/16 (at least 1).
func newAIMD(total int) aimd {
	return aimd{min: 1, max: total, step: max(total/16, 1), kvHigh: 0.95}
}

// initial is an endpoint's limit before any reading: an even share of
// total over n endpoints, rounded up.
func (a aimd) initial(n int) int {
	return min(max((a.max+n-1)/max(n, 1), a.min), a.max)
}

// next is the limit after a reading s, given whether the endpoint had
// limit requests in flight at some point since the previous reading.
func (a aimd) next(limit int, s QueueStats, busy bool) int {
	switch {
	case s.Waiting > 0 || s.KVCacheUsage >= a.kvHigh:
		return max(limit/2, a.min)
	case busy:
		return min(limit+a.step, a.max)
	}
	return min(max(limit, a.min), a.max)
}
