package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/server"
)

// binary returns the path of an integration test's external program: the
// environment variable set by .ci/integration.sh, else the program on
// PATH; the test is skipped when there is neither.
func binary(t *testing.T, envVar string, names ...string) string {
	t.Helper()
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skipf("no %s: set $%s or install it (.ci/integration.sh does: apt-get install %s)", names[0], envVar, names[0])
	return ""
}

// freePort returns a loopback port free at the time of the call.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// promSample is one series of a Prometheus query result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
	Values [][2]any          `json:"values"`
}

func promQuery(t *testing.T, base, path string, q url.Values) []promSample {
	t.Helper()
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return nil // not up yet
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		// Prometheus listens before its storage is ready and answers
		// "Service Unavailable" in plain text until then.
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read Prometheus answer: %v", err)
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("decode Prometheus answer (%s): %v: %.200q", resp.Status, err, body)
	}
	if out.Status != "success" {
		t.Fatalf("Prometheus query %v: %s", q, out.Error)
	}
	return out.Data.Result
}

func sampleValue(t *testing.T, v any) float64 {
	t.Helper()
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("sample value %v: %v", v, err)
	}
	return f
}

// TestPrometheusScrapes runs a real Prometheus against the daemon and
// reads a run's validation reward curve back with PromQL.
func TestPrometheusScrapes(t *testing.T) {
	prom := binary(t, "GRPO_PROMETHEUS", "prometheus")
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	dir := t.TempDir()
	target := strings.TrimPrefix(s.URL(), "http://")
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: grpo
    scrape_interval: 1s
    static_configs: [{targets: ["%s"]}]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, prom,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr,
		"--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", prom, err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", b)
		}
	})

	promBase := "http://" + promAddr
	var up []promSample
	scraped := testutil.Eventually(func() bool {
		up = promQuery(t, promBase, "/api/v1/query", url.Values{"query": {`up{job="grpo"}`}})
		return len(up) == 1 && sampleValue(t, up[0].Value[1]) == 1
	})
	if !scraped {
		t.Fatalf("Prometheus did not scrape the daemon within %s: %+v", testutil.Patience, up)
	}

	// Steps slow enough that Prometheus sees the curve move: many
	// validation episodes per step.
	t0 := time.Now()
	launch(t, s.URL(), "", "run: {name: curve, steps: 3}\nvalidation: {episodes: 128, n: [5, 10]}\n")
	// The run is slow by design: wait for it step by step, each step
	// given the patience of one wait, not the whole run.
	for step := range 3 {
		waitRun(t, s.URL(), "curve", fmt.Sprintf("step %d", step), func(r runJSON) bool { return len(r.Steps) > step || finished(r) })
	}
	r := waitRun(t, s.URL(), "curve", "finish", finished)
	if r.State != "succeeded" || r.Best == nil {
		t.Fatalf("run state %s (%s), best %v", r.State, r.Error, r.Best)
	}
	t.Logf("run took %v", time.Since(t0))
	last := r.Steps[len(r.Steps)-1].Validation.RewardMean
	// The final values, each a gauge or counter the run sets at its own
	// moment of the last step: wait until one scrape has them all.
	final := map[string]float64{
		`grpo_reward_mean{run="curve",split="validation",n="all"}`:      last,
		`grpo_best_step{run="curve"}`:                                   float64(r.Best.Step),
		`grpo_step{run="curve"}`:                                        3,
		`grpo_episodes_total{run="curve",split="validation"}`:           4 * 256,
		`sum(grpo_trainer_jobs_total{run="curve",outcome="succeeded"})`: 3,
		// Every tool's validation series; the requests' endpoint joins the
		// fleet's series of the run's one endpoint ("none" joins nothing).
		// Per-endpoint series are dropped when the run ends (they would
		// pile up over many runs), so the join reads their last scraped
		// values, which a range selector keeps past the series' end.
		`count(grpo_tool_calls_total{run="curve",split="validation"})`: 6,
		`count(last_over_time(grpo_llm_requests_total{run="curve",outcome="ok"}[5m]) * on (run, endpoint) last_over_time(grpo_inference_endpoint_up{run="curve"}[5m]))`: 1,
	}
	var wrong []string
	allFinal := testutil.Eventually(func() bool {
		wrong = nil
		for q, want := range final {
			res := promQuery(t, promBase, "/api/v1/query", url.Values{"query": {q}})
			switch {
			case len(res) != 1:
				wrong = append(wrong, fmt.Sprintf("%s: %d series", q, len(res)))
			case sampleValue(t, res[0].Value[1]) != want:
				wrong = append(wrong, fmt.Sprintf("%s = %v, want %v", q, sampleValue(t, res[0].Value[1]), want))
			case strings.HasPrefix(q, "grpo_") && res[0].Metric["job"] != "grpo":
				wrong = append(wrong, fmt.Sprintf("%s: series %v, want job grpo", q, res[0].Metric))
			}
		}
		return len(wrong) == 0
	})
	if !allFinal {
		t.Fatalf("after %s of scrapes:\n%s", testutil.Patience, strings.Join(wrong, "\n"))
	}

	// The curve over time: every value Prometheus scraped is one of the
	// run's validation rewards, and the last is the last step's.
	end := time.Now()
	res := promQuery(t, promBase, "/api/v1/query_range", url.Values{
		"query": {`grpo_reward_mean{run="curve",split="validation",n="all"}`},
		"start": {strconv.FormatInt(end.Add(-5*time.Minute).Unix(), 10)},
		"end":   {strconv.FormatInt(end.Unix()+1, 10)},
		"step":  {"1"},
	})
	if len(res) != 1 || len(res[0].Values) == 0 {
		t.Fatalf("query_range: %+v", res)
	}
	valid := map[float64]bool{}
	for _, st := range r.Steps {
		valid[st.Validation.RewardMean] = true
	}
	distinct := map[float64]bool{}
	for _, v := range res[0].Values {
		f := sampleValue(t, v[1])
		if !valid[f] {
			t.Fatalf("curve value %v is not a validation reward of the run (%v)", f, valid)
		}
		distinct[f] = true
	}
	t.Logf("validation curve: %d samples, %d distinct values", len(res[0].Values), len(distinct))
	if len(distinct) < 2 {
		t.Fatalf("Prometheus saw %d validation value(s) over the run: want the curve to move", len(distinct))
	}
}
