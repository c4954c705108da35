package server

import (
	"encoding/json"
	"testing"

	"github.com/grpo-dev/grpo/orchestrator"
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
		`{"type":"episode_finished","run":"r","step":3,"data":{"split":"validation","seconds":0.5}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"running"}}`,
		`{"type":"job_state","run":"r","step":3,"data":{"id":"r/step-0003","state":"succeeded"}}`,
		`{"type":"adapter_loaded","run":"r","step":3,"data":{"name":"r/step-0003","path":"/x"}}`,
		`{"type":"validation_done","run":"r","step":3,"data":{"reward_mean":0.5,"reward_std":0.25}}`,
		`{"type":"best_changed","run":"r","step":3,"data":{"step":2,"value":0.75}}`,
		`{"type":"step_committed","run":"r","step":3,"data":{"step":3,"train":{"reward_mean":0.125,"reward_std":0.5,"zero_variance_groups":1},
		  "job":{"submitted":"2026-01-02T15:04:05Z","finished":"2026-01-02T15:04:07Z"}}}`,
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
		{"grpo_reward_mean validation", value(t, m.rewardMean.WithLabelValues("r", "validation")), 0.5},
		{"grpo_reward_std validation", value(t, m.rewardStd.WithLabelValues("r", "validation")), 0.25},
		{"grpo_reward_mean train", value(t, m.rewardMean.WithLabelValues("r", "train")), 0.125},
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
