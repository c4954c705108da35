package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/orchestrator"
)

// TestFinishedRunDropsEndpointSeries: a run's per-endpoint series (its
// requests by endpoint, its fleet's endpoint gauges and counters) go when
// the run finishes and its fleet closes; another run's stay.
func TestFinishedRunDropsEndpointSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	a, b := newFakeEndpoint(t), newFakeEndpoint(t)
	fr := testFleet(t, m, "r", inference.FleetOptions{OutageWindow: -1}, a, b)
	fs := testFleet(t, m, "s", inference.FleetOptions{OutageWindow: -1}, a)
	m.completer("r", fr)
	m.completer("s", fs)
	count := func(run string) int {
		n := 0
		for _, name := range []string{"grpo_llm_requests_total", "grpo_llm_request_duration_seconds", "grpo_inference_endpoint_up",
			"grpo_inference_endpoint_concurrency_limit", "grpo_inference_endpoint_drains_total",
			"grpo_inference_endpoint_readmissions_total", "grpo_inference_adapter_load_attempts_total"} {
			n += len(gathered(t, reg, name, "run", run))
		}
		return n
	}
	// Run r: (none, A, B) x 3 outcomes + 3 histograms; A and B x (up,
	// limit, drains, readmissions, 5 load outcomes).
	if got, want := count("r"), 3*3+3+2*(4+5); got != want {
		t.Fatalf("%d series of run r, want %d", got, want)
	}
	m.event(orchestrator.Event{Type: orchestrator.EventRunFinished, Run: "r", RunFinished: &orchestrator.RunFinished{State: "succeeded"}})
	fr.Close()
	if got := count("r"); got != 0 {
		t.Fatalf("%d series of run r after it finished, want 0", got)
	}
	if got, want := count("s"), 2*3+2+(4+5); got != want {
		t.Fatalf("%d series of run s, still playing, want %d", got, want)
	}
}
