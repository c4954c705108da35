package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/promote"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/server"
)

// TestRunNamesWithSlashes: every route that takes a run name serves runs
// named as grpo experiment names them (<experiment>/<arm>/<seed>) when the
// name is one percent-encoded path segment (exp%2Fshaped%2F1), as the
// dashboard sends it: GET run, steps, best and a step's transcripts,
// POST cancel and promote, the websocket's ?run= filter, and the Location
// of a created run.
func TestRunNamesWithSlashes(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	const done, long = "exp/shaped/1", "exp/shaped/2"
	path := func(name string) string { return base + "/api/v1/runs/" + url.PathEscape(name) }
	if got := url.PathEscape(done); got != "exp%2Fshaped%2F1" {
		t.Fatalf("PathEscape = %s", got)
	}

	// The websocket filtered on the long run, subscribed before it starts.
	conn, _, err := dialWS(t, base, "?run="+url.QueryEscape(long), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()

	// Create: the Location is the run's URL, one segment.
	req, _ := http.NewRequest("POST", base+"/api/v1/runs", strings.NewReader("run: {name: "+done+", steps: 1}\nvalidation: {episodes: 4, transcripts: 1}\n"))
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/api/v1/runs/exp%2Fshaped%2F1" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST = %d %s, Location %q; want 201, /api/v1/runs/exp%%2Fshaped%%2F1", resp.StatusCode, b, resp.Header.Get("Location"))
	}
	r := waitRun(t, base, url.PathEscape(done), "the end", finished)
	if r.Run != done || r.State != checkpoint.StateSucceeded || len(r.Steps) != 2 {
		t.Fatalf("GET run = %+v, want %s succeeded with 2 steps", r, done)
	}

	// Steps, best and transcripts.
	code, body := do(t, "GET", path(done)+"/steps", "", "")
	var steps []struct {
		Step int `json:"step"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &steps) != nil || len(steps) != 2 || steps[1].Step != 1 {
		t.Fatalf("GET steps = %d %s", code, body)
	}
	code, body = do(t, "GET", path(done)+"/best", "", "")
	var best checkpoint.Selection
	if code != http.StatusOK || json.Unmarshal(body, &best) != nil || best.Step != r.Best.Step {
		t.Fatalf("GET best = %d %s, want step %d", code, body, r.Best.Step)
	}
	code, body = do(t, "GET", path(done)+"/steps/1/transcripts", "", "")
	var eps []struct {
		ID string `json:"id"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &eps) != nil || len(eps) != 1 {
		t.Fatalf("GET transcripts = %d %s, want one episode", code, body)
	}
	// The name's segments unencoded are another path: not this run.
	if code, body := do(t, "GET", base+"/api/v1/runs/"+done+"/steps", "", ""); code == http.StatusOK && contains(body, `"step"`) {
		t.Fatalf("GET with the name unencoded = %d %s, want no run", code, body)
	}

	// Cancel a running one; the filtered stream carried its events only.
	launch(t, base, "", "run: {name: "+long+", steps: 50}\nvalidation: {episodes: 4}\n")
	waitRun(t, base, url.PathEscape(long), "step 1", func(r runJSON) bool { return len(r.Steps) >= 2 })
	if code, body := do(t, "POST", path(long)+"/cancel", "", ""); code != http.StatusOK {
		t.Fatalf("cancel = %d %s", code, body)
	}
	if r := getRun(t, base, url.PathEscape(long)); r.State != checkpoint.StateCancelled || r.Hosted {
		t.Fatalf("after cancel: state %s hosted %v", r.State, r.Hosted)
	}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	seen := map[string]int{}
	for seen[orchestrator.EventRunFinished] == 0 {
		var ev orchestrator.Event
		if err := conn.ReadJSON(&ev); err != nil {
			t.Fatalf("read: %v (seen %v)", err, seen)
		}
		if ev.Run != long {
			t.Fatalf("stream filtered on %s got an event of %q", long, ev.Run)
		}
		seen[ev.Type]++
	}
	if seen[orchestrator.EventRunStarted] != 1 || seen[orchestrator.EventStepCommitted] < 2 {
		t.Fatalf("filtered stream saw %v", seen)
	}

	// Promote a stored run on an endpoint.
	b := refBackend(t)
	vllm := httptest.NewServer(b.InferenceHandler())
	defer vllm.Close()
	const stored = "exp/paper/3"
	p := storeSlashRun(t, e.store, t.TempDir(), stored, vllm.URL+"/v1")
	// GET run carries the stored test measurements, as runs show --json.
	te := checkpoint.TestEvaluation{Split: checkpoint.SplitTest, Seed: 2000000, Evaluation: checkpoint.Evaluation{Step: 2, Episodes: 3, RewardMean: 0.5}}
	if err := e.store.PutTestEvaluation(context.Background(), stored, te); err != nil {
		t.Fatal(err)
	}
	code, body = do(t, "GET", path(stored), "", "")
	var view struct {
		Tests []checkpoint.TestEvaluation `json:"tests"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &view) != nil || len(view.Tests) != 1 || view.Tests[0].Seed != 2000000 ||
		view.Tests[0].Evaluation.Step != 2 || view.Tests[0].Evaluation.RewardMean != 0.5 {
		t.Fatalf("GET %s = %d %s; want its one test evaluation", stored, code, body)
	}
	if contains(mustGet(t, path(done)), `"tests"`) {
		t.Fatalf("GET %s lists tests; it has none", done)
	}
	code, body = do(t, "POST", path(stored)+"/promote", "", "")
	var res promote.Result
	if code != http.StatusOK || json.Unmarshal(body, &res) != nil {
		t.Fatalf("promote = %d %s", code, body)
	}
	if res.Name != stored+"-best" || res.Step != 2 || len(res.Endpoints) != 1 || res.Endpoints[0].Action != promote.ActionLoaded {
		t.Fatalf("promote result %+v, want %s-best from step 2 loaded (adapter %s)", res, stored, p)
	}
}

func mustGet(t *testing.T, u string) []byte {
	t.Helper()
	code, body := do(t, "GET", u, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", u, code, body)
	}
	return body
}

// storeSlashRun records a finished two-step run on endpoints with real
// adapters named as the orchestrator names them ('.' for '/'), step 2
// the best; it returns step 2's adapter path.
func storeSlashRun(t *testing.T, store *checkpoint.Store, dir, name string, endpoints ...string) string {
	t.Helper()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = name, 2
	for _, u := range endpoints {
		cfg.Inference.Endpoints = append(cfg.Inference.Endpoints, config.Endpoint{URL: u})
	}
	ctx := context.Background()
	if err := store.CreateRun(ctx, checkpoint.Run{Name: name, Config: cfg.JSON(), Steps: 2, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	var last string
	for step, r := range []float64{0.1, 0.2, 0.6} {
		s := checkpoint.Step{Step: step, N: 5}
		if step > 0 {
			a, err := refmodel.NewAdapter(2, 4, uint64(step))
			if err != nil {
				t.Fatal(err)
			}
			last = filepath.Join(dir, fmt.Sprintf("%s-step-%04d", strings.ReplaceAll(name, "/", "."), step))
			if err := a.Save(last); err != nil {
				t.Fatal(err)
			}
			s.Adapter = &checkpoint.Adapter{Name: filepath.Base(last), Path: last}
		}
		if err := store.CommitStep(ctx, name, s, &checkpoint.Evaluation{Step: step, Episodes: 4, RewardMean: r}); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// TestDashboardEncodesRunNames: every URL the dashboard builds from a run
// name encodes it as one segment (encodeURIComponent), so runs named
// <experiment>/<arm>/<seed> open, stream, cancel and promote.
func TestDashboardEncodesRunNames(t *testing.T) {
	js, err := os.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	// "/api/v1/runs/" + X: X must be encodeURIComponent(...).
	uses := regexp.MustCompile(`"/api/v1/runs/"\s*\+\s*([A-Za-z.]+)`).FindAllSubmatch(js, -1)
	if len(uses) < 4 {
		t.Fatalf("found %d run URLs in app.js; the pattern no longer matches the code", len(uses))
	}
	for _, u := range uses {
		if string(u[1]) != "encodeURIComponent" {
			t.Errorf("app.js builds a run URL from %s without encodeURIComponent: %s", u[1], u[0])
		}
	}
	for _, re := range []string{`"\?run=" \+ encodeURIComponent\(`} {
		if !regexp.MustCompile(re).Match(js) {
			t.Errorf("app.js: no %s", re)
		}
	}
}
