package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
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

// nAll is the n label of a split's totals over every table size.
const nAll = "all"

// noEndpoint is the endpoint label of a request that reached no inference
// endpoint (none was live, or it was cancelled while waiting for a slot),
// or whose completer does not say which endpoint answered.
const noEndpoint = "none"

// MetricNames lists every metric the daemon registers (DESIGN §9). The
// deploy assets are checked against it.
var MetricNames = []string{
	"grpo_step", "grpo_reward_mean", "grpo_reward_std", "grpo_best_step", "grpo_best_reward",
	"grpo_episodes_total", "grpo_episode_duration_seconds", "grpo_tool_calls_total",
	"grpo_invalid_outputs_total", "grpo_deadlocks_total", "grpo_zero_variance_groups_total",
	"grpo_llm_requests_total", "grpo_llm_request_duration_seconds", "grpo_inflight_requests",
	"grpo_trainer_job_duration_seconds", "grpo_trainer_jobs_total", "grpo_adapter_loads_total",
	"grpo_deadlock_rate", "grpo_meals_mean", "grpo_invalid_rate",
	"grpo_trainer_loss", "grpo_trainer_kl", "grpo_trainer_grad_norm", "grpo_trainer_clip_fraction",
	"grpo_trainer_optimizer_step", "grpo_trainer_sampler_logprob_gap", "grpo_trainer_entropy", "grpo_trainer_update_norm",
	// The inference fleet's (inference.NewFleetMetrics).
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
	deadlockRate    *prometheus.GaugeVec
	mealsMean       *prometheus.GaugeVec
	invalidRate     *prometheus.GaugeVec
	trainerLoss     *prometheus.GaugeVec
	trainerKL       *prometheus.GaugeVec
	trainerGradNorm *prometheus.GaugeVec
	// trainerGauges are every trainer gauge by its key in a job's
	// metrics (trainer.Metrics.Map).
	trainerGauges map[string]*prometheus.GaugeVec
	// fleet is every run's inference fleet: endpoint health, concurrency
	// limits, drains, readmissions, adapter load attempts.
	fleet *inference.FleetMetrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		step: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_step", Help: "Last committed training step of the run (0 = base model).",
		}, []string{"run"}),
		rewardMean: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_reward_mean", Help: "Mean episode reward of the last committed step, by table size n (n=\"all\": every size); split=validation over time is the reward curve.",
		}, []string{"run", "split", "n"}),
		rewardStd: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_reward_std", Help: "Standard deviation of the episode rewards of the last committed step, by table size n (n=\"all\": every size).",
		}, []string{"run", "split", "n"}),
		deadlockRate: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_deadlock_rate", Help: "Fraction of the last committed step's episodes that deadlocked, by table size n (n=\"all\": every size).",
		}, []string{"run", "split", "n"}),
		mealsMean: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_meals_mean", Help: "Mean meals per episode of the last committed step, by table size n (n=\"all\": every size).",
		}, []string{"run", "split", "n"}),
		invalidRate: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_invalid_rate", Help: "Invalid LLM outputs per call of the last committed step, by table size n (n=\"all\": every size).",
		}, []string{"run", "split", "n"}),
		trainerLoss: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_trainer_loss", Help: "Loss the trainer reported for the last committed step's job.",
		}, []string{"run"}),
		trainerKL: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_trainer_kl", Help: "KL to the reference policy the trainer reported for the last committed step's job.",
		}, []string{"run"}),
		trainerGradNorm: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_trainer_grad_norm", Help: "Gradient norm the trainer reported for the last committed step's job.",
		}, []string{"run"}),
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
			Name: "grpo_tool_calls_total", Help: "Valid tool calls the policy made, by split (train, validation) and tool.",
		}, []string{"run", "split", "tool"}),
		invalidOutputs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_invalid_outputs_total", Help: "LLM outputs that were not exactly one call of a known tool, by split (train, validation).",
		}, []string{"run", "split"}),
		deadlocks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_deadlocks_total", Help: "Episodes that ended deadlocked.",
		}, []string{"run", "split"}),
		zeroVariance: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_zero_variance_groups_total", Help: "Training groups whose rewards were all equal (no signal).",
		}, []string{"run"}),
		llmRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "grpo_llm_requests_total", Help: "Chat completion requests, by outcome (ok, error, cancelled: the run was stopped while the request was in flight) and endpoint (the inference endpoint that answered, or that a failed request was last sent to; \"none\" for a request that reached none).",
		}, []string{"run", "endpoint", "outcome"}),
		llmDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "grpo_llm_request_duration_seconds", Help: "Latency of chat completion requests, waits for a slot and resends included, by endpoint (as in grpo_llm_requests_total).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"run", "endpoint"}),
		inflight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "grpo_inflight_requests", Help: "Chat completion requests in flight, those waiting for a slot at an endpoint included.",
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
	trainerGauge := func(name, help string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"run"})
	}
	m.trainerGauges = map[string]*prometheus.GaugeVec{
		"loss": m.trainerLoss, "kl": m.trainerKL, "grad_norm": m.trainerGradNorm,
		"clip_fraction":  trainerGauge("grpo_trainer_clip_fraction", "Fraction of the sampled tokens whose ratio the trainer clipped, for the last committed step's job."),
		"optimizer_step": trainerGauge("grpo_trainer_optimizer_step", "Optimizer steps along the adapter's lineage after the last committed step's job, as the trainer reported them."),
		"sampler_logprob_gap": trainerGauge("grpo_trainer_sampler_logprob_gap",
			"Mean |trainer logprob - sampler logprob| (nats) over the sampled tokens of the last committed step's job, before its first update: near 0 when the trainer scores what the inference server sampled."),
		"entropy":     trainerGauge("grpo_trainer_entropy", "Mean entropy of the policy over the sampled tokens of the last committed step's job, as the trainer reported it."),
		"update_norm": trainerGauge("grpo_trainer_update_norm", "L2 norm of the adapter weights' change in the last committed step's job, as the trainer reported it."),
	}
	return m
}

// splitFigures are one split.s figures of a step at one table size (n="all":
// every size). A nil field is not known and leaves its gauge alone.
type splitFigures struct {
	n                                   string
	mean, std, deadlock, meals, invalid *float64
}

func (m *metrics) setSplit(run, split string, f splitFigures) {
	for _, g := range []struct {
		vec *prometheus.GaugeVec
		v   *float64
	}{{m.rewardMean, f.mean}, {m.rewardStd, f.std}, {m.deadlockRate, f.deadlock}, {m.mealsMean, f.meals}, {m.invalidRate, f.invalid}} {
		if g.v != nil {
			g.vec.WithLabelValues(run, split, f.n).Set(*g.v)
		}
	}
}

func ptr(v float64) *float64 { return &v }

// train sets the train split's gauges from a step's training stats: the
// step plays one table size, so its n and "all" get the same figures.
func (m *metrics) train(run string, n int, t checkpoint.TrainStats) {
	for _, label := range []string{strconv.Itoa(n), nAll} {
		m.setSplit(run, splitTrain, splitFigures{n: label, mean: ptr(t.RewardMean), std: ptr(t.RewardStd),
			deadlock: ptr(t.DeadlockRate), meals: ptr(t.MealsMean), invalid: ptr(t.InvalidRate)})
	}
}

// validation sets the validation split's gauges: the totals, and each
// table size's figures (its reward std when the evaluation records it).
func (m *metrics) validation(run string, all checkpoint.Evaluation) {
	m.setSplit(run, splitValidation, splitFigures{n: nAll, mean: ptr(all.RewardMean), std: ptr(all.RewardStd),
		deadlock: ptr(all.DeadlockRate), meals: ptr(all.MealsMean), invalid: ptr(all.InvalidRate)})
	for _, pn := range all.PerN {
		m.setSplit(run, splitValidation, splitFigures{n: strconv.Itoa(pn.N), mean: ptr(pn.RewardMean), std: pn.RewardStd,
			deadlock: ptr(pn.DeadlockRate), meals: ptr(pn.MealsMean), invalid: ptr(pn.InvalidRate)})
	}
}

// job sets the trainer gauges from a finished job's metrics; a metric the
// trainer did not report leaves its gauge alone.
func (m *metrics) job(run string, metrics map[string]float64) {
	for key, vec := range m.trainerGauges {
		if v, ok := metrics[key]; ok {
			vec.WithLabelValues(run).Set(v)
		}
	}
}

// restore exports the last values of every run the store holds, so that
// finished runs' series survive a daemon restart. Runs the daemon
// resumes overwrite theirs as they play.
func (m *metrics) restore(ctx context.Context, store *checkpoint.Store) error {
	list, err := store.ListRuns(ctx)
	if errors.Is(err, checkpoint.ErrNoDatabase) {
		return nil // a new daemon's store: nothing to restore
	}
	if err != nil {
		return fmt.Errorf("restore metrics: %w", err)
	}
	for _, r := range list {
		// The curve: the gauges need no validation records.
		run, steps, evals, err := store.Curve(ctx, r.Name)
		if err != nil {
			return fmt.Errorf("restore metrics of run %s: %w", r.Name, err)
		}
		if len(steps) == 0 {
			continue
		}
		last := steps[len(steps)-1]
		m.step.WithLabelValues(r.Name).Set(float64(last.Step))
		for i := len(steps) - 1; i >= 0; i-- {
			if s := steps[i]; s.Train != nil {
				m.train(r.Name, s.N, *s.Train)
				break
			}
		}
		for i := len(steps) - 1; i >= 0; i-- {
			if j := steps[i].Job; j != nil && len(j.Metrics) > 0 {
				m.job(r.Name, j.Metrics)
				break
			}
		}
		if len(evals) > 0 {
			m.validation(r.Name, evals[len(evals)-1])
		}
		if sel, err := checkpoint.Select(run.Policy, run.Metric, run.EMA, steps, evals); err == nil {
			m.bestStep.WithLabelValues(r.Name).Set(float64(sel.Step))
			m.bestReward.WithLabelValues(r.Name).Set(sel.Value)
		}
	}
	return nil
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
		d := e.ValidationDone
		ev := checkpoint.Evaluation{RewardMean: d.RewardMean, RewardStd: d.RewardStd, DeadlockRate: d.DeadlockRate, MealsMean: d.MealsMean, InvalidRate: d.InvalidRate}
		for _, pn := range d.PerN {
			ev.PerN = append(ev.PerN, checkpoint.EvalN{N: pn.N, Episodes: pn.Episodes, RewardMean: pn.RewardMean,
				DeadlockRate: pn.DeadlockRate, MealsMean: pn.MealsMean, InvalidRate: pn.InvalidRate, RewardStd: pn.RewardStd})
		}
		m.validation(e.Run, ev)
	case e.BestChanged != nil:
		m.bestStep.WithLabelValues(e.Run).Set(float64(e.BestChanged.Step))
		m.bestReward.WithLabelValues(e.Run).Set(e.BestChanged.Value)
	case e.StepCommitted != nil:
		m.step.WithLabelValues(e.Run).Set(float64(e.Step))
		if t := e.StepCommitted.Train; t != nil {
			m.train(e.Run, e.StepCommitted.N, checkpoint.TrainStats{RewardMean: t.RewardMean, RewardStd: t.RewardStd,
				DeadlockRate: t.DeadlockRate, MealsMean: t.MealsMean, InvalidRate: t.InvalidRate})
			m.zeroVariance.WithLabelValues(e.Run).Add(float64(t.ZeroVarianceGroups))
		}
		if j := e.StepCommitted.Job; j != nil {
			if !j.Finished.IsZero() && !j.Submitted.IsZero() {
				m.jobDuration.WithLabelValues(e.Run).Observe(j.Finished.Sub(j.Submitted).Seconds())
			}
			m.job(e.Run, j.Metrics)
		}
	case e.RunFinished != nil:
		// Per-endpoint series grow with runs x endpoints: a run that
		// ended keeps its per-run series only.
		m.llmRequests.DeletePartialMatch(prometheus.Labels{"run": e.Run})
		m.llmDuration.DeletePartialMatch(prometheus.Labels{"run": e.Run})
	case e.RunStarted != nil:
		// Bind the run's children so that its series exist from the start.
		m.step.WithLabelValues(e.Run).Set(float64(max(e.RunStarted.From-1, 0)))
		for _, split := range []string{splitTrain, splitValidation} {
			m.invalidOutputs.WithLabelValues(e.Run, split)
		}
		m.inflight.WithLabelValues(e.Run)
	}
}

// onCall returns the observer of the LLM calls of run's episodes of
// split: tool calls and invalid outputs, by the action the output decoded
// to.
func (m *metrics) onCall(run, split string) func(action string, d time.Duration, err error) {
	invalid := m.invalidOutputs.WithLabelValues(run, split)
	tools := make(map[string]prometheus.Counter, len(rollout.ToolNames))
	for _, t := range rollout.ToolNames {
		tools[t] = m.toolCalls.WithLabelValues(run, split, t)
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

// endpointLister is a Completer that says which endpoints it sends to
// (inference.Fleet).
type endpointLister interface {
	Endpoints() []string
}

// completer wraps run's Completer to count requests and time them, by the
// endpoint that answered, and to track those in flight. The children of
// "none" and of every endpoint c lists are bound here, once: their series
// exist from the run's start, and a request costs a map lookup.
func (m *metrics) completer(run string, c rollout.Completer) rollout.Completer {
	in := &instrumented{next: c, m: m, run: run, inflight: m.inflight.WithLabelValues(run),
		endpoints: map[string]*endpointRequests{noEndpoint: m.endpointRequests(run, noEndpoint)}}
	if l, ok := c.(endpointLister); ok {
		for _, url := range l.Endpoints() {
			in.endpoints[url] = m.endpointRequests(run, url)
		}
	}
	return in
}

// endpointRequests are a run's request children of one endpoint.
type endpointRequests struct {
	ok, failed prometheus.Counter
	cancelled  prometheus.Counter // the caller gave up: the run was stopped
	duration   prometheus.Observer
}

func (m *metrics) endpointRequests(run, endpoint string) *endpointRequests {
	return &endpointRequests{
		ok:        m.llmRequests.WithLabelValues(run, endpoint, "ok"),
		failed:    m.llmRequests.WithLabelValues(run, endpoint, "error"),
		cancelled: m.llmRequests.WithLabelValues(run, endpoint, "cancelled"),
		duration:  m.llmDuration.WithLabelValues(run, endpoint),
	}
}

type instrumented struct {
	next      rollout.Completer
	m         *metrics
	run       string
	endpoints map[string]*endpointRequests // read-only once built
	inflight  prometheus.Gauge
}

var _ rollout.EncodedReader = (*instrumented)(nil)

// ReadsEncodedMessages passes on what the wrapped Completer reads: a
// daemon's runs then keep each message once, as JSON, as grpo run's do
// (a wrapper that hid it made every daemon-hosted conversation keep its
// messages twice).
func (c *instrumented) ReadsEncodedMessages() bool {
	er, ok := c.next.(rollout.EncodedReader)
	return ok && er.ReadsEncodedMessages()
}

func (c *instrumented) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	c.inflight.Inc()
	t0 := time.Now()
	out, err := c.next.Complete(ctx, req)
	d := time.Since(t0).Seconds()
	c.inflight.Dec()
	e := c.at(answeredBy(out, err))
	e.duration.Observe(d)
	switch {
	case err != nil && (ctx.Err() != nil || errors.Is(err, context.Canceled)):
		e.cancelled.Inc()
	case err != nil:
		e.failed.Inc()
	default:
		e.ok.Inc()
	}
	return out, err
}

// at is endpoint's children: bound at the start, or here for an endpoint
// the completer did not list.
func (c *instrumented) at(endpoint string) *endpointRequests {
	if e, ok := c.endpoints[endpoint]; ok {
		return e
	}
	return c.m.endpointRequests(c.run, endpoint)
}

// answeredBy is the endpoint label of a request's outcome: the endpoint
// that answered it, or that a failed request was last sent to, or
// noEndpoint.
func answeredBy(out *rollout.Completion, err error) string {
	if err != nil {
		if ee, ok := errors.AsType[*inference.EndpointError](err); ok {
			return ee.Endpoint
		}
		return noEndpoint
	}
	if out == nil || out.Endpoint == "" {
		return noEndpoint
	}
	return out.Endpoint
}
