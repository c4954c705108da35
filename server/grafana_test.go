package server_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// vllmMetrics are the vLLM metric names the dashboard may chart: vLLM's
// own, not registered by the daemon, so excepted here by name.
var vllmMetrics = map[string]bool{
	"vllm:num_requests_running": true, "vllm:num_requests_waiting": true,
	"vllm:kv_cache_usage_perc": true, "vllm:gpu_cache_usage_perc": true,
	"vllm:lora_requests_info": true, "vllm:request_success_total": true,
}

// splitSeries are the daemon's series with a split label.
var splitSeries = []string{"grpo_episodes_total", "grpo_episode_duration_seconds_bucket", "grpo_tool_calls_total", "grpo_invalid_outputs_total", "grpo_deadlocks_total"}

type grafanaPanel struct {
	Type            string                                `json:"type"`
	Title           string                                `json:"title"`
	Targets         []struct{ Expr, LegendFormat string } `json:"targets"`
	Transformations []struct {
		ID      string          `json:"id"`
		Options json.RawMessage `json:"options"`
	} `json:"transformations"`
}

// TestGrafanaStepVLLMAndTrainerPanels checks the dashboard's step-indexed
// view, its per-n and trainer panels, and vLLM's panels.
func TestGrafanaStepVLLMAndTrainerPanels(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "dashboards", "grpo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct{ Panels []grafanaPanel }
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	vllmName := regexp.MustCompile(`\bvllm:[a-z_]+`)
	stepIndexed, perN := 0, false
	charted := map[string]bool{}
	for _, p := range dash.Panels {
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, m := range vllmName.FindAllString(tg.Expr, -1) {
				if !vllmMetrics[m] {
					t.Errorf("panel %q charts %s, not a known vLLM metric", p.Title, m)
				}
				charted[m] = true
			}
			for _, gauge := range []string{"grpo_reward_mean", "grpo_reward_std", "grpo_deadlock_rate", "grpo_meals_mean"} {
				// Without an n matcher a query mixes the totals and the sizes
				// (std by n excepted: it charts every n, "all" included).
				if strings.Contains(tg.Expr, gauge+"{") && !strings.Contains(tg.Expr, "n=") && !strings.Contains(tg.Expr, "n!=") && p.Title != "Validation reward std by n" {
					t.Errorf("panel %q queries %s without an n matcher: %s", p.Title, gauge, tg.Expr)
				}
			}
			if strings.Contains(tg.Expr, `n!="all"`) && strings.Contains(tg.Expr, "grpo_reward_mean") {
				perN = true
			}
			for _, m := range splitSeries {
				// Training and validation episodes play at other
				// temperatures and sizes: a sum over both mixes them.
				if strings.Contains(tg.Expr, m+"{") && strings.Contains(tg.Expr, "sum") && !strings.Contains(tg.Expr, "split") {
					t.Errorf("panel %q sums %s over its splits: %s", p.Title, m, tg.Expr)
				}
			}
			if strings.HasPrefix(tg.Expr, "grpo_trainer_") && strings.Contains(tg.Expr, "{") && !strings.Contains(tg.Expr, "job") {
				t.Errorf("panel %q: %s is served by both the daemon and the trainer; say which job", p.Title, tg.Expr)
			}
		}
		all := strings.Join(exprs, "\n")
		// Step-indexed: grpo_step is a field named "step" that the
		// panel groups by (the x axis or the table's key).
		if strings.Contains(all, "grpo_step") {
			for _, tr := range p.Transformations {
				var opts bytes.Buffer
				json.Compact(&opts, tr.Options)
				if tr.ID == "groupBy" && strings.Contains(opts.String(), `"step":{"operation":"groupby"`) {
					stepIndexed++
				}
			}
		}
		if strings.HasPrefix(p.Title, "Trainer service") && !strings.Contains(all, `job="trainer"`) {
			t.Errorf("panel %q does not read the trainer's own metrics", p.Title)
		}
	}
	if stepIndexed < 2 {
		t.Errorf("%d step-indexed panels, want a chart and a table", stepIndexed)
	}
	if !perN {
		t.Error("no per-n validation reward panel")
	}
	for _, m := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info"} {
		if !charted[m] {
			t.Errorf("dashboard does not chart %s", m)
		}
	}
}
