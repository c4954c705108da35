package server

import (
	"context"
	"time"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Splits of the reward gauges and episode counters.
const (
	splitTrain      = "train"
	splitValidation = "validation"
)

// MetricNames lists every metric the daemon registers (DESIGN §9). The
// deploy assets are checked against it.
var MetricNames = []string{
	"grpo_step", "grpo_reward_mean", "grpo_reward_std", "grpo_best_step", "grpo_best_reward",
	"grpo_episodes_total", "grpo_episode_duration_seconds", "grpo_tool_calls_total",
	"grpo_invalid_outputs_total", "grpo_deadlocks_total", "grpo_zero_variance_groups_total",
	"grpo_llm_requests_total", "grpo_llm_request_duration_seconds", "grpo_inflight_requests",
	"grpo_trainer_job_duration_seconds", "grpo_trainer_jobs_total", "grpo_adapter_loads_total",
	// The inference fleet's (inference.FleetMetricNames).
	"grpo_inference_endpoint_up", "grpo_inference_endpoint_concurrency_limit",
	"grpo_inference_endpoint_drains_total", "grpo_inference_endpoint_readmissions_total",
	"grpo_inference_adapter_load_attempts_total",
}

// metrics are the daemon's Prometheus metrics, fed from orchestrator
// events, LLM call observations and an instrumented Completer.
type metrics struct {
	step            *prometheus.GaugeVec
	rewardMean      *prometheus.GaugeVec
	rewardStd       *prometheus.GaugeVec
	bestStep        *prometheus.GaugeVec
	bestReward      *prometheus.GaugeVec
	episodes        *prometheus.CounterVec
	episodeDuration *prometheus.HistogramVec
	toolCalls       *prometheus.CounterVec
	invalidOutputs  *prometheus.CounterVec
	deadlocks       *prometheus.CounterVec
	zeroVariance    *prometheus.CounterVec
	llmRequests     *prometheus.CounterVec
	llmDuration     *prometheus.HistogramVec
	inflight        *prometheus.GaugeVec
	jobDuration     *prometheus.HistogramVec
	jobs            *prometheus.CounterVec
	adapterLoads    *prometheus.CounterVec
	// fleet is every run's inference fleet: endpoint health, concurrency
	// limits, drains, readmissions, adapter load attempts.
	fleet *inference.FleetMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		step: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_step", Help: "Last committed training step of the run (0 = base model).",
		}, []string{"run"}),
		rewardMean: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_reward_mean", Help: "Mean episode reward of the last committed step; split=validation over time is the reward curve.",
		}, []string{"run", "split"}),
		rewardStd: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_reward_std", Help: "Standard deviation of the episode rewards of the last committed step.",
		}, []string{"run", "split"}),
		bestStep: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_best_step", Help: "Step selected by the run's selection policy.",
		}, []string{"run"}),
		bestReward: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_best_reward", Help: "Score of the selected step under the run's selection metric.",
		}, []string{"run"}),
		episodes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_episodes_total", Help: "Episodes played.",
		}, []string{"run", "split"}),
		episodeDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpo_episode_duration_seconds", Help: "Wall time of one episode.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 10),
		}, []string{"run", "split"}),
		toolCalls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_tool_calls_total", Help: "Valid tool calls the policy made, by tool.",
		}, []string{"run", "tool"}),
		invalidOutputs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_invalid_outputs_total", Help: "LLM outputs that were not exactly one call of a known tool.",
		}, []string{"run"}),
		deadlocks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_deadlocks_total", Help: "Episodes that ended deadlocked.",
		}, []string{"run", "split"}),
		zeroVariance: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_zero_variance_groups_total", Help: "Training groups whose rewards were all equal (no signal).",
		}, []string{"run"}),
		llmRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_llm_requests_total", Help: "Chat completion requests, by outcome (ok, error).",
		}, []string{"run", "outcome"}),
		llmDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpo_llm_request_duration_seconds", Help: "Latency of chat completion requests, retries included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"run"}),
		inflight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_inflight_requests", Help: "Chat completion requests in flight.",
		}, []string{"run"}),
		jobDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpo_trainer_job_duration_seconds", Help: "Time from submitting a trainer job to its success.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}, []string{"run"}),
		jobs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_trainer_jobs_total", Help: "Trainer jobs that reached a terminal state, by outcome (succeeded, failed, cancelled).",
		}, []string{"run", "outcome"}),
		adapterLoads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_adapter_loads_total", Help: "Adapters hot-loaded into the inference endpoints.",
		}, []string{"run"}),
		fleet: inference.NewFleetMetrics(reg),
	}
}

// event updates the metrics from one orchestrator event.
func (m *metrics) event(e orchestrator.Event) {
	switch {
	case e.EpisodeFinished != nil:
		d := e.EpisodeFinished
		m.episodes.WithLabelValues(e.Run, d.Split).Inc()
		m.episodeDuration.WithLabelValues(e.Run, d.Split).Observe(d.Seconds)
		if d.Deadlock {
			m.deadlocks.WithLabelValues(e.Run, d.Split).Inc()
		}
	case e.JobState != nil:
		if e.JobState.Terminal() {
			m.jobs.WithLabelValues(e.Run, e.JobState.State).Inc()
		}
	case e.AdapterLoaded != nil:
		m.adapterLoads.WithLabelValues(e.Run).Inc()
	case e.ValidationDone != nil:
		m.rewardMean.WithLabelValues(e.Run, splitValidation).Set(e.ValidationDone.RewardMean)
		m.rewardStd.WithLabelValues(e.Run, splitValidation).Set(e.ValidationDone.RewardStd)
	case e.BestChanged != nil:
		m.bestStep.WithLabelValues(e.Run).Set(float64(e.BestChanged.Step))
		m.bestReward.WithLabelValues(e.Run).Set(e.BestChanged.Value)
	case e.StepCommitted != nil:
		m.step.WithLabelValues(e.Run).Set(float64(e.Step))
		if t := e.StepCommitted.Train; t != nil {
			m.rewardMean.WithLabelValues(e.Run, splitTrain).Set(t.RewardMean)
			m.rewardStd.WithLabelValues(e.Run, splitTrain).Set(t.RewardStd)
			m.zeroVariance.WithLabelValues(e.Run).Add(float64(t.ZeroVarianceGroups))
		}
		if j := e.StepCommitted.Job; j != nil && !j.Finished.IsZero() && !j.Submitted.IsZero() {
			m.jobDuration.WithLabelValues(e.Run).Observe(j.Finished.Sub(j.Submitted).Seconds())
		}
	case e.RunStarted != nil:
		// Bind the run's children so that its series exist from the start.
		m.step.WithLabelValues(e.Run).Set(float64(max(e.RunStarted.From-1, 0)))
		m.invalidOutputs.WithLabelValues(e.Run)
		m.inflight.WithLabelValues(e.Run)
	}
}

// onCall returns the LLM call observer of run: tool calls and invalid
// outputs, by the action the output decoded to.
func (m *metrics) onCall(run string) func(action string, d time.Duration, err error) {
	invalid := m.invalidOutputs.WithLabelValues(run)
	tools := make(map[string]prometheus.Counter, len(rollout.ToolNames))
	for _, t := range rollout.ToolNames {
		tools[t] = m.toolCalls.WithLabelValues(run, t)
	}
	return func(action string, _ time.Duration, err error) {
		if err != nil {
			return
		}
		if c, ok := tools[action]; ok {
			c.Inc()
			return
		}
		invalid.Inc()
	}
}

// completer wraps run's Completer to count requests, time them and track
// those in flight.
func (m *metrics) completer(run string, c rollout.Completer) rollout.Completer {
	return &instrumented{
		next:     c,
		ok:       m.llmRequests.WithLabelValues(run, "ok"),
		failed:   m.llmRequests.WithLabelValues(run, "error"),
		duration: m.llmDuration.WithLabelValues(run),
		inflight: m.inflight.WithLabelValues(run),
	}
}

type instrumented struct {
	next       rollout.Completer
	ok, failed prometheus.Counter
	duration   prometheus.Observer
	inflight   prometheus.Gauge
}

var _ rollout.Completer = (*instrumented)(nil)

func (c *instrumented) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	c.inflight.Inc()
	t0 := time.Now()
	out, err := c.next.Complete(ctx, req)
	c.duration.Observe(time.Since(t0).Seconds())
	c.inflight.Dec()
	if err != nil {
		c.failed.Inc()
	} else {
		c.ok.Inc()
	}
	return out, err
}
