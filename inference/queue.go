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
