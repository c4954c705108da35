package refmodel

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// serverMetrics are the vLLM metrics the orchestrator reads for
// back-pressure (DESIGN §6), under vLLM's names and model_name label.
type serverMetrics struct {
	running      prometheus.Gauge
	waiting      prometheus.Gauge
	kvCache      prometheus.Gauge
	success      *prometheus.CounterVec
	stop         prometheus.Counter // success children bound once
	toolCalls    prometheus.Counter
	promptTokens prometheus.Counter
	genTokens    prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	f := promauto.With(reg)
	labels := prometheus.Labels{"model_name": BaseModelName}
	m := &serverMetrics{
		running: f.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:num_requests_running", Help: "Number of requests in model execution batches.", ConstLabels: labels,
		}),
		waiting: f.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:num_requests_waiting", Help: "Number of requests waiting to be processed.", ConstLabels: labels,
		}),
		kvCache: f.NewGauge(prometheus.GaugeOpts{
			Name: "vllm:kv_cache_usage_perc", Help: "KV-cache usage. 1 means 100 percent usage.", ConstLabels: labels,
		}),
		success: f.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels,
		}, []string{"finished_reason"}),
		promptTokens: f.NewCounter(prometheus.CounterOpts{
			Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels,
		}),
		genTokens: f.NewCounter(prometheus.CounterOpts{
			Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels,
		}),
	}
	m.stop = m.success.WithLabelValues("stop")
	m.toolCalls = m.success.WithLabelValues("tool_calls")
	return m
}
