package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/trainer"
)

// TestRunRetryJob: a run whose step 1 trainer job failed exits 1 saying
// how to go on ('grpo run --resume RUN --db DB --retry-job'); that
// command, as printed, trains the step under a new job id and finishes
// the run. The trainer in front of a reference backend takes and fails
// step 1's first attempt and passes everything else on.
func TestRunRetryJob(t *testing.T) {
	b := refBackend(t, 1)
	inf := httptest.NewServer(b.InferenceHandler())
	t.Cleanup(inf.Close)
	real := b.TrainerHandler()
	first := func(id string) bool { return strings.HasSuffix(id, "/step-0001") }
	tr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
			body, _ := io.ReadAll(r.Body)
			var req trainer.JobRequest
			if json.Unmarshal(body, &req) == nil && first(req.ID) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusAccepted)
				fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		case r.Method == http.MethodGet && first(strings.TrimPrefix(r.URL.Path, "/v1/jobs/")):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":%q,"state":"failed","error":"CUDA out of memory"}`, strings.TrimPrefix(r.URL.Path, "/v1/jobs/"))
			return
		}
		real.ServeHTTP(w, r)
	}))
	t.Cleanup(tr.Close)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: rj, steps: 2, seed: 4}
validation: {episodes: 2}
inference: {model: %s, endpoints: [{url: %s/v1}]}
trainer: {kind: jobs, url: %s, base_model: %s, hyperparameters: {learning_rate: %v}}
`, refmodel.BaseModelName, inf.URL, tr.URL, refmodel.BaseModelName, refmodel.DefaultLearningRate)), 0o644)
	db := filepath.Join(dir, "run.db")
	code, _, errs := cli(t, "run", "--config", cfg, "--db", db, "--quiet")
	want := "once the cause is fixed, 'grpo run --resume rj --db " + db + " --retry-job' continues from the last committed step"
	if code != 1 || !strings.Contains(errs, "CUDA out of memory") || !strings.Contains(errs, want) {
		t.Fatalf("grpo run with a failing job: exit %d, stderr lacks %q:\n%s", code, want, errs)
	}
	code, out, errs := cli(t, "run", "--resume", "rj", "--db", db, "--retry-job", "--quiet")
	if code != 0 || !strings.Contains(out, "run rj (succeeded)") {
		t.Fatalf("grpo run --resume --retry-job: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = cli(t, "runs", "show", "rj", "--db", db, "--json")
	if code != 0 || !strings.Contains(out, "/step-0001-retry-2") {
		t.Fatalf("runs show after the retry: exit %d, no step-0001-retry-2 job:\n%s", code, out)
	}
}
