package server

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/prometheus/client_golang/prometheus"
)

// TestTrainerDiagnosticsExported: a committed step's job metrics set the
// trainer gauges, the diagnostics of DESIGN §5 included, read back from
// the registry; a run whose trainer reports no diagnostics has no series
// of them (not a 0, which for the sampler logprob gap would read as
// "scores exactly what was sampled").
func TestTrainerDiagnosticsExported(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	for _, in := range []string{
		`{"type":"step_committed","run":"r","step":2,"data":{"step":2,"n":5,"job":{"metrics":{"loss":0.75,"kl":0.0625,"grad_norm":1.5,
		  "clip_fraction":0.125,"optimizer_step":8,"sampler_logprob_gap":0.015625,"entropy":1.25,"update_norm":0.5}}}}`,
		`{"type":"step_committed","run":"old","step":1,"data":{"step":1,"n":5,"job":{"metrics":{"loss":0.5,"kl":0,"grad_norm":1,"clip_fraction":0.25}}}}`,
	} {
		var e orchestrator.Event
		if err := json.Unmarshal([]byte(in), &e); err != nil {
			t.Fatalf("decode %s: %v", in, err)
		}
		m.event(e)
	}
	// The registry as a scrape reads it: gauge name -> run -> value.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "grpo_trainer_") {
			continue
		}
		got[f.GetName()] = map[string]float64{}
		for _, s := range f.GetMetric() {
			got[f.GetName()][s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
		}
	}
	want := map[string]map[string]float64{
		"grpo_trainer_loss":                {"r": 0.75, "old": 0.5},
		"grpo_trainer_kl":                  {"r": 0.0625, "old": 0},
		"grpo_trainer_grad_norm":           {"r": 1.5, "old": 1},
		"grpo_trainer_clip_fraction":       {"r": 0.125, "old": 0.25},
		"grpo_trainer_optimizer_step":      {"r": 8},
		"grpo_trainer_sampler_logprob_gap": {"r": 0.015625},
		"grpo_trainer_entropy":             {"r": 1.25},
		"grpo_trainer_update_norm":         {"r": 0.5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("trainer gauges\n got %v\nwant %v", got, want)
	}
}
