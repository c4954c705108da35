package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestMetricsFromEvents feeds events, decoded from their JSON form, to the
// metrics and reads the series back.
func TestMetricsFromEvents(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	for _, in := range []string{
		`{"type":"run_started","run":"r","step":3,"data":{"steps":4,"from":3}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"train","deadlocked":true,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":5,"reward":0.25,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":5,"reward":0.75,"seconds":0.5}}`,
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","n":10,"reward":1,"seconds":0.5}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"running"}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"succeeded"}}`,
		`{"type":"adapter_loaded","run":"r","step":3,"data":{"name":"r/step-0003","path":"/x"}}`,
		`{"type":"validation_done","run":"r","step":3,"data":{"reward_mean":0.5,"reward_std":0.25,"deadlock_rate":0.25,"meals_mean":3,"invalid_rate":0.125,
		  "per_n":[{"n":5,"episodes":2,"reward_mean":0.5,"deadlock_rate":0.5,"meals_mean":2,"invalid_rate":0.25,"reward_std":0.375},{"n":10,"episodes":1,"reward_mean":1,"deadlock_rate":0,"meals_mean":5,"invalid_rate":0,"reward_std":0}]}}`,
		`{"type":"best_changed","run":"r","step":3,"data":{"step":2,"value":0.75}}`,
		`{"type":"step_committed","run":"r","step":3,"data":{"step":3,"n":5,"train":{"reward_mean":0.125,"reward_std":0.5,"zero_variance_groups":1,"deadlock_rate":0.5,"meals_mean":1.5,"invalid_rate":0.25},
		  "job":{"submitted":"2026-01-02T15:04:05Z","finished":"2026-01-02T15:04:07Z","metrics":{"loss":0.75,"kl":0.0625,"grad_norm":1.5}}}}`,
	} {
		var e orchestrator.Event
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("decode %s: %v", in, err)
		}
		m.event(e)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"grpo_step", value(t, m.step.WithLabelValues("r")), 3},
		{"grpo_episodes_total train", value(t, m.episodes.WithLabelValues("r", "train")), 1},
		{"grpo_deadlocks_total train", value(t, m.deadlocks.WithLabelValues("r", "train")), 1},
		{"grpo_deadlocks_total validation", value(t, m.deadlocks.WithLabelValues("r", "validation")), 0},
		{"grpo_trainer_jobs_total succeeded", value(t, m.jobs.WithLabelValues("r", "succeeded")), 1},
		{"grpo_trainer_jobs_total running", value(t, m.jobs.WithLabelValues("r", "running")), 0},
		{"grpo_adapter_loads_total", value(t, m.adapterLoads.WithLabelValues("r")), 1},
		{"grpo_reward_mean validation all", value(t, m.rewardMean.WithLabelValues("r", "validation", "all")), 0.5},
		{"grpo_reward_std validation all", value(t, m.rewardStd.WithLabelValues("r", "validation", "all")), 0.25},
		{"grpo_reward_mean validation n=5", value(t, m.rewardMean.WithLabelValues("r", "validation", "5")), 0.5},
		{"grpo_reward_mean validation n=10", value(t, m.rewardMean.WithLabelValues("r", "validation", "10")), 1},
		{"grpo_reward_std validation n=5", value(t, m.rewardStd.WithLabelValues("r", "validation", "5")), 0.375},
		{"grpo_reward_std validation n=10", value(t, m.rewardStd.WithLabelValues("r", "validation", "10")), 0},
		{"grpo_invalid_rate validation n=5", value(t, m.invalidRate.WithLabelValues("r", "validation", "5")), 0.25},
		{"grpo_deadlock_rate validation all", value(t, m.deadlockRate.WithLabelValues("r", "validation", "all")), 0.25},
		{"grpo_deadlock_rate validation n=5", value(t, m.deadlockRate.WithLabelValues("r", "validation", "5")), 0.5},
		{"grpo_meals_mean validation n=10", value(t, m.mealsMean.WithLabelValues("r", "validation", "10")), 5},
		{"grpo_invalid_rate validation all", value(t, m.invalidRate.WithLabelValues("r", "validation", "all")), 0.125},
		{"grpo_reward_mean train all", value(t, m.rewardMean.WithLabelValues("r", "train", "all")), 0.125},
		{"grpo_reward_mean train n=5", value(t, m.rewardMean.WithLabelValues("r", "train", "5")), 0.125},
		{"grpo_reward_std train n=5", value(t, m.rewardStd.WithLabelValues("r", "train", "5")), 0.5},
		{"grpo_deadlock_rate train all", value(t, m.deadlockRate.WithLabelValues("r", "train", "all")), 0.5},
		{"grpo_meals_mean train all", value(t, m.mealsMean.WithLabelValues("r", "train", "all")), 1.5},
		{"grpo_invalid_rate train n=5", value(t, m.invalidRate.WithLabelValues("r", "train", "5")), 0.25},
		{"grpo_trainer_loss", value(t, m.trainerLoss.WithLabelValues("r")), 0.75},
		{"grpo_trainer_kl", value(t, m.trainerKL.WithLabelValues("r")), 0.0625},
		{"grpo_trainer_grad_norm", value(t, m.trainerGradNorm.WithLabelValues("r")), 1.5},
		{"grpo_best_step", value(t, m.bestStep.WithLabelValues("r")), 2},
		{"grpo_best_reward", value(t, m.bestReward.WithLabelValues("r")), 0.75},
		{"grpo_zero_variance_groups_total", value(t, m.zeroVariance.WithLabelValues("r")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s=%v, want %v", c.name, c.got, c.want)
		}
	}
	var h dto.Metric
	if err := m.jobDuration.WithLabelValues("r").(prometheus.Histogram).Write(&h); err != nil {
		t.Fatal(err)
	}
	if got, want := h.GetHistogram().GetSampleCount(), uint64(1); got != want {
		t.Errorf("grpo_trainer_job_duration_seconds count=%d, want %d", got, want)
	}
	if got, want := h.GetHistogram().GetSampleSum(), 2.0; got != want {
		t.Errorf("grpo_trainer_job_duration_seconds sum=%v, want %v", got, want)
	}
}

// blocking is a Completer that waits for its context.
type blocking struct{}

func (blocking) Complete(ctx context.Context, _ *rollout.Request) (*rollout.Completion, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("chat completion: %w", ctx.Err())
}

type failing struct{}

func (failing) Complete(context.Context, *rollout.Request) (*rollout.Completion, error) {
	return nil, errors.New("server said 500")
}

// TestCancelledCallsAreNotErrors: calls in flight when their run is
// stopped count as outcome="cancelled", real failures as "error"; a
// completer that names no endpoint counts them at endpoint="none".
func TestCancelledCallsAreNotErrors(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	ctx, cancel := context.WithCancel(context.Background())
	c := m.completer("r", blocking{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); c.Complete(ctx, &rollout.Request{}) }()
	}
	for value(t, m.inflight.WithLabelValues("r")) != 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	m.completer("r", failing{}).Complete(context.Background(), &rollout.Request{})
	for outcome, want := range map[string]float64{"cancelled": 3, "error": 1, "ok": 0} {
		if got := value(t, m.llmRequests.WithLabelValues("r", noEndpoint, outcome)); got != want {
			t.Errorf("grpo_llm_requests_total{outcome=%q}=%v, want %v", outcome, got, want)
		}
	}
}

// completion is an inference server's answer: a call of think.
const completion = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"think","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// fakeEndpoint is an inference server that answers every chat completion
// with completion, or with status while it is not 0, or not at all (until
// the client gives up) while block is set.
type fakeEndpoint struct {
	*httptest.Server
	hits   atomic.Int64
	status atomic.Int64
	block  atomic.Bool
}

func newFakeEndpoint(t *testing.T) *fakeEndpoint {
	f := &fakeEndpoint{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server then notices the client is gone
		f.hits.Add(1)
		switch {
		case f.block.Load():
			<-r.Context().Done()
		case f.status.Load() != 0:
			w.WriteHeader(int(f.status.Load()))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(completion))
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// url is the endpoint's URL as the fleet and its metrics name it.
func (f *fakeEndpoint) url() string { return f.URL + "/v1" }

// testFleet is run's fleet over eps, with clients that do not retry and
// the fleet metrics of m.
func testFleet(t *testing.T, m *metrics, run string, opts inference.FleetOptions, eps ...*fakeEndpoint) *inference.Fleet {
	t.Helper()
	noRetry := &httpx.Policy{}
	var rs []inference.Replica
	for _, e := range eps {
		rs = append(rs, inference.Replica{
			Chat:  inference.NewChatClient(e.url(), inference.ChatOptions{Retry: noRetry}),
			Admin: inference.NewAdminClient(e.url(), inference.AdminOptions{Retry: noRetry}),
		})
	}
	opts.Metrics, opts.Run = m.fleet, run
	f := inference.NewFleet(rs, opts)
	t.Cleanup(f.Close)
	return f
}

func chatRequest() *rollout.Request {
	return &rollout.Request{Model: "m", Messages: []rollout.Message{{Role: rollout.RoleUser, Content: "hi"}}}
}

// gathered is the series of the metric name in reg that have every label
// of labels (name, value pairs).
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(s.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == labels[i] && l.GetValue() == labels[i+1] }) {
					continue series
				}
			}
			out = append(out, s)
		}
	}
	return out
}

// TestRequestsByEndpoint: a run's requests count at the endpoint that
// answered them, a failed one at the endpoint it was last sent to, one
// that reached none at "none"; the endpoint label is the fleet metrics'
// (the series join), and every series exists from the start.
func TestRequestsByEndpoint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	a, b := newFakeEndpoint(t), newFakeEndpoint(t)
	c := m.completer("r", testFleet(t, m, "r", inference.FleetOptions{OutageWindow: -1}, a, b))
	if got, want := len(gathered(t, reg, "grpo_llm_requests_total", "run", "r")), 3*3; got != want {
		t.Fatalf("%d grpo_llm_requests_total series before any request, want %d (none, A, B by ok, error, cancelled)", got, want)
	}
	ctx := context.Background()
	complete := func(n int, fail bool) {
		t.Helper()
		for range n {
			if _, err := c.Complete(ctx, chatRequest()); (err != nil) != fail {
				t.Fatalf("Complete()=%v, want failure %v", err, fail)
			}
		}
	}
	complete(4, false) // ties go round the endpoints: two answers each
	a.status.Store(http.StatusInternalServerError)
	complete(4, false) // A fails once, is drained, B answers
	b.status.Store(http.StatusBadRequest)
	complete(1, true) // the request's own error, at B
	b.status.Store(http.StatusServiceUnavailable)
	complete(1, true) // B fails and is drained: no endpoint left
	complete(1, true) // none live

	if got, want := [2]int64{a.hits.Load(), b.hits.Load()}, [2]int64{2 + 1, 2 + 4 + 1 + 1}; got != want {
		t.Fatalf("requests at A, B: %v, want %v", got, want)
	}
	want := map[[2]string]float64{{a.url(), "ok"}: 2, {b.url(), "ok"}: 6, {b.url(), "error"}: 2, {noEndpoint, "error"}: 1}
	for _, ep := range []string{noEndpoint, a.url(), b.url()} {
		for _, outcome := range []string{"ok", "error", "cancelled"} {
			if got, want := value(t, m.llmRequests.WithLabelValues("r", ep, outcome)), want[[2]string{ep, outcome}]; got != want {
				t.Errorf("grpo_llm_requests_total{endpoint=%q,outcome=%q}=%v, want %v", ep, outcome, got, want)
			}
		}
	}
	for ep, want := range map[string]uint64{noEndpoint: 1, a.url(): 2, b.url(): 8} {
		if got := gathered(t, reg, "grpo_llm_request_duration_seconds", "run", "r", "endpoint", ep); len(got) != 1 || got[0].GetHistogram().GetSampleCount() != want {
			t.Errorf("grpo_llm_request_duration_seconds{endpoint=%q}: %d series (%v), want one counting %d", ep, len(got), got, want)
		}
	}
	for _, ep := range []string{a.url(), b.url()} {
		if got := gathered(t, reg, "grpo_inference_endpoint_drains_total", "run", "r", "endpoint", ep); len(got) != 1 || got[0].GetCounter().GetValue() != 1 {
			t.Errorf("grpo_inference_endpoint_drains_total{endpoint=%q}: %d series (%v), want one at 1", ep, len(got), got)
		}
	}

	// One request in flight at the only slot, a second waiting for it:
	// stopped, the first counts at its endpoint, the second at none.
	e := newFakeEndpoint(t)
	e.block.Store(true)
	s := m.completer("s", testFleet(t, m, "s", inference.FleetOptions{Concurrency: 1}, e))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := s.Complete(ctx, chatRequest()); done <- err }()
	for e.hits.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if _, err := s.Complete(stopped, chatRequest()); err == nil {
		t.Fatal("a cancelled request waiting for a slot succeeded")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled request in flight succeeded")
	}
	for _, ep := range []string{noEndpoint, e.url()} {
		if got := value(t, m.llmRequests.WithLabelValues("s", ep, "cancelled")); got != 1 {
			t.Errorf("run s: grpo_llm_requests_total{endpoint=%q,outcome=\"cancelled\"}=%v, want 1", ep, got)
		}
	}

	// A completer that lists no endpoints: its answers still count at the
	// endpoint they name.
	u := m.completer("u", answering{comp: &rollout.Completion{Endpoint: "http://elsewhere/v1"}})
	u.Complete(context.Background(), chatRequest())
	if got := value(t, m.llmRequests.WithLabelValues("u", "http://elsewhere/v1", "ok")); got != 1 {
		t.Errorf("an unlisted endpoint's answers=%v, want 1", got)
	}
}

// answering is a Completer that answers comp, over endpoints.
type answering struct {
	comp      *rollout.Completion
	endpoints []string
}

func (a answering) Complete(context.Context, *rollout.Request) (*rollout.Completion, error) {
	return a.comp, nil
}

func (a answering) Endpoints() []string { return a.endpoints }

// TestCallsBySplit: tool calls and invalid outputs count in the split of
// the episode that made the call; failed calls are neither. The invalid
// outputs' series exist from the run's start.
func TestCallsBySplit(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.event(orchestrator.Event{Type: orchestrator.EventRunStarted, Run: "r", RunStarted: &orchestrator.RunStarted{Steps: 2}})
	if got, want := len(gathered(t, reg, "grpo_invalid_outputs_total", "run", "r")), 2; got != want {
		t.Fatalf("%d grpo_invalid_outputs_total series at the run's start, want %d (train, validation)", got, want)
	}
	train, validation := m.onCall("r", splitTrain), m.onCall("r", splitValidation)
	for _, a := range []string{rollout.Think, rollout.Think, rollout.Eat, ""} {
		train(a, time.Millisecond, nil)
	}
	train("", time.Millisecond, errors.New("server said 500"))
	for _, a := range []string{rollout.PickUpLeft, "", ""} {
		validation(a, time.Millisecond, nil)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"train think", value(t, m.toolCalls.WithLabelValues("r", splitTrain, rollout.Think)), 2},
		{"train eat", value(t, m.toolCalls.WithLabelValues("r", splitTrain, rollout.Eat)), 1},
		{"train pick_up_left", value(t, m.toolCalls.WithLabelValues("r", splitTrain, rollout.PickUpLeft)), 0},
		{"validation pick_up_left", value(t, m.toolCalls.WithLabelValues("r", splitValidation, rollout.PickUpLeft)), 1},
		{"validation think", value(t, m.toolCalls.WithLabelValues("r", splitValidation, rollout.Think)), 0},
		{"train invalid", value(t, m.invalidOutputs.WithLabelValues("r", splitTrain)), 1},
		{"validation invalid", value(t, m.invalidOutputs.WithLabelValues("r", splitValidation)), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s=%v, want %v", c.name, c.got, c.want)
		}
	}
	if got, want := len(gathered(t, reg, "grpo_tool_calls_total", "run", "r")), 2*len(rollout.ToolNames); got != want {
		t.Errorf("%d grpo_tool_calls_total series, want %d (every tool of both splits)", got, want)
	}
}

// TestObserversAllocateNothing: counting a request and observing a call,
// done thousands of times a second, allocate nothing.
func TestObserversAllocateNothing(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	c := m.completer("r", answering{comp: &rollout.Completion{Endpoint: "http://a/v1"}, endpoints: []string{"http://a/v1"}})
	ctx, req := context.Background(), chatRequest()
	if n := testing.AllocsPerRun(100, func() { c.Complete(ctx, req) }); n != 0 {
		t.Errorf("instrumented Complete: %v allocations, want 0", n)
	}
	on := m.onCall("r", splitTrain)
	if n := testing.AllocsPerRun(100, func() { on(rollout.Think, time.Millisecond, nil); on("", time.Millisecond, nil) }); n != 0 {
		t.Errorf("onCall: %v allocations, want 0", n)
	}
}

// TestRestoreFromNoStore: a daemon's first start, before its store file
// exists, restores nothing and finds nothing wrong.
func TestRestoreFromNoStore(t *testing.T) {
	store := checkpoint.New(filepath.Join(t.TempDir(), "none.db"), checkpoint.Options{})
	if err := newMetrics(prometheus.NewRegistry()).restore(context.Background(), store); err != nil {
		t.Fatalf("restore from a store not created yet: %v", err)
	}
}

// TestRestoreFromStore: a new daemon's metrics show the stored runs'
// last values before any event.
func TestRestoreFromStore(t *testing.T) {
	ctx := context.Background()
	store := checkpoint.New(filepath.Join(t.TempDir(), "s.db"), checkpoint.Options{})
	if err := store.CreateRun(ctx, checkpoint.Run{Name: "done", Steps: 2, Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for i, mean := range []float64{0.25, 0.75, 0.5} {
		st := checkpoint.Step{Step: i, N: 5}
		if i > 0 {
			st.Train = &checkpoint.TrainStats{RewardMean: float64(i) / 8, DeadlockRate: 0.5}
			st.Job = &checkpoint.Job{State: "succeeded", Metrics: map[string]float64{"loss": float64(i), "kl": 0.5, "grad_norm": 2}}
		}
		// n=10's reward std is not recorded, as in evaluations stored
		// before it was.
		std := mean / 2
		ev := &checkpoint.Evaluation{Step: i, Episodes: 2, RewardMean: mean, RewardStd: 0.125, Rewards: []float64{mean, mean},
			PerN: []checkpoint.EvalN{{N: 5, Episodes: 1, RewardMean: mean - 0.25, RewardStd: &std, InvalidRate: mean / 4},
				{N: 10, Episodes: 1, RewardMean: mean + 0.25}}}
		if err := store.CommitStep(ctx, "done", st, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetRunState(ctx, "done", checkpoint.StateSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	if err := m.restore(ctx, store); err != nil {
		t.Fatal(err)
	}
	// No n=10 validation std is made up: train and validation at n=5 and
	// "all", nothing more.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "grpo_reward_std" && len(f.GetMetric()) != 4 {
			t.Errorf("grpo_reward_std has %d series after restore, want 4 (none for n=10, whose std is not stored): %v", len(f.GetMetric()), f.GetMetric())
		}
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"grpo_step", value(t, m.step.WithLabelValues("done")), 2},
		{"grpo_best_step", value(t, m.bestStep.WithLabelValues("done")), 1},
		{"grpo_best_reward", value(t, m.bestReward.WithLabelValues("done")), 0.75},
		{"grpo_reward_mean validation all", value(t, m.rewardMean.WithLabelValues("done", "validation", "all")), 0.5},
		{"grpo_reward_std validation all", value(t, m.rewardStd.WithLabelValues("done", "validation", "all")), 0.125},
		{"grpo_reward_mean validation n=5", value(t, m.rewardMean.WithLabelValues("done", "validation", "5")), 0.25},
		{"grpo_reward_mean validation n=10", value(t, m.rewardMean.WithLabelValues("done", "validation", "10")), 0.75},
		{"grpo_reward_std validation n=5", value(t, m.rewardStd.WithLabelValues("done", "validation", "5")), 0.25},
		{"grpo_invalid_rate validation n=5", value(t, m.invalidRate.WithLabelValues("done", "validation", "5")), 0.125},
		{"grpo_reward_mean train n=5", value(t, m.rewardMean.WithLabelValues("done", "train", "5")), 0.25},
		{"grpo_deadlock_rate train all", value(t, m.deadlockRate.WithLabelValues("done", "train", "all")), 0.5},
		{"grpo_trainer_loss", value(t, m.trainerLoss.WithLabelValues("done")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s=%v, want %v", c.name, c.got, c.want)
		}
	}
}

// value reads a gauge's or a counter's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	if g := d.GetGauge(); g != nil {
		return g.GetValue()
	}
	return d.GetCounter().GetValue()
}

// encodedReader is an answering Completer that reads encoded messages.
type encodedReader struct{ answering }

func (encodedReader) ReadsEncodedMessages() bool { return true }

// TestInstrumentedPassesOnEncodedReading: the daemon's wrapper says it
// reads encoded messages exactly when what it wraps does (a Fleet does),
// so that the episodes of a daemon's runs keep each message once.
func TestInstrumentedPassesOnEncodedReading(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	fleet := inference.NewFleet([]inference.Replica{{
		Chat:  inference.NewChatClient("http://127.0.0.1:1/v1", inference.ChatOptions{}),
		Admin: inference.NewAdminClient("http://127.0.0.1:1/v1", inference.AdminOptions{}),
	}}, inference.FleetOptions{})
	defer fleet.Close()
	for name, tt := range map[string]struct {
		inner rollout.Completer
		want  bool
	}{"fleet": {fleet, true}, "encoded": {encodedReader{}, true}, "plain": {answering{}, false}} {
		er, ok := m.completer("r", tt.inner).(rollout.EncodedReader)
		if got := ok && er.ReadsEncodedMessages(); got != tt.want {
			t.Errorf("%s: the wrapper reads encoded messages: %v, want %v", name, got, tt.want)
		}
	}
}
