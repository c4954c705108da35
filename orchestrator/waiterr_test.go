package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/trainer"
)

// TestWaitErrorNamesTheJobOnce: a run whose wait for its trainer job
// fails fails with the client's error, which names the job once; it was
// wrapped again ("trainer job ID: wait for trainer job ID: ..."), and a
// cancelled wait's error named no job. A job that ended failed or
// cancelled (by the trainer, or by the wait past job_timeout) says how to
// retry the step, since a resume reattaches to the ended job.
func TestWaitErrorNamesTheJobOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		poll func(w http.ResponseWriter, cancel context.CancelFunc) // answers GET /v1/jobs/{id}
		want string                                                 // after "step 1: ", with ID for the job id and URL for the trainer's
	}{
		{"timeout", func(w http.ResponseWriter, _ context.CancelFunc) {
			fmt.Fprint(w, `{"state":"running","progress":0.5}`)
		}, "wait for trainer job ID: still running after 100ms, cancelled it: trainer job timed out (a job id is never trained twice, so resuming fails the same way: " +
			"to retry the step, resume with --retry-job (the step's job is submitted again under a new id; a daemon's run: POST /api/v1/runs/RUN/resume with {\"retry_job\": true}), or remove the cancelled job from the trainer first; the embedded trainer keeps it in its data directory's jobs/)"},
		{"job cancelled", func(w http.ResponseWriter, _ context.CancelFunc) {
			fmt.Fprint(w, `{"state":"cancelled","error":"cancelled by the operator"}`)
		}, "trainer job ID cancelled: cancelled by the operator (a job id is never trained twice, so resuming fails the same way: " +
			"to retry the step, resume with --retry-job (the step's job is submitted again under a new id; a daemon's run: POST /api/v1/runs/RUN/resume with {\"retry_job\": true}), or remove the cancelled job from the trainer first; the embedded trainer keeps it in its data directory's jobs/)"},
		{"failed poll", func(w http.ResponseWriter, _ context.CancelFunc) {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"bad job id"}`)
		}, "wait for trainer job ID: GET URL/v1/jobs/ID: 400 Bad Request: bad job id"},
		{"cancelled context", func(w http.ResponseWriter, cancel context.CancelFunc) {
			cancel()
			fmt.Fprint(w, `{"state":"running","progress":0.5}`)
		}, "wait for trainer job ID: context canceled"},
		{"job failed", func(w http.ResponseWriter, _ context.CancelFunc) {
			fmt.Fprint(w, `{"state":"failed","error":"CUDA out of memory"}`)
		}, "trainer job ID failed: CUDA out of memory (a job id is never trained twice, so resuming fails the same way: " +
			"to retry the step, resume with --retry-job (the step's job is submitted again under a new id; a daemon's run: POST /api/v1/runs/RUN/resume with {\"retry_job\": true}), or remove the failed job from the trainer first; the embedded trainer keeps it in its data directory's jobs/)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.Method {
				case http.MethodPost:
					var req trainer.JobRequest
					jsonDecode(r, &req)
					w.WriteHeader(http.StatusAccepted)
					fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
				case http.MethodGet:
					tc.poll(w, cancel)
				case http.MethodDelete:
					fmt.Fprint(w, `{"state":"cancelled"}`)
				}
			}))
			t.Cleanup(srv.Close)
			e.trainer = trainer.NewJobClient(srv.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond})
			cfg := smallConfig(t, "w", 1)
			// Only the timeout case runs into job_timeout. The others
			// keep the default, which the submit and the first poll, whose
			// answer each case is about, cannot outlast: under load and
			// -race they took longer than 100ms.
			if tc.name == "timeout" {
				cfg.Trainer.JobTimeout = config.Duration(100 * time.Millisecond)
			}
			err := e.orchestrator(nil).Start(ctx, cfg)
			run, _, _ := snapshot(t, e.store, "w")
			id := trainer.JobID(trainer.JobKey("w", run.ID), 1)
			want := "step 1: " + strings.NewReplacer("ID", id, "URL", srv.URL).Replace(tc.want)
			if err == nil || err.Error() != want {
				t.Fatalf("err = %v\nwant  %s", err, want)
			}
		})
	}
}
