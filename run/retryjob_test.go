package run_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/run"
	"github.com/grpo-dev/grpo/trainer"
)

// TestRetryEndedJobOption: run.Options.RetryEndedJob reaches the
// orchestrator. A trainer that fails every step's first attempt (any job
// id without "-retry-") fails the run at step 1; a plain reopen fails
// the same way, and a reopen with RetryEndedJob trains the step under
// "<id>-retry-2" on the real trainer behind it and finishes the run.
func TestRetryEndedJobOption(t *testing.T) {
	real, err := url.Parse(startTrainer(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(real)
	var failed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req trainer.JobRequest
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
			body, _ := io.ReadAll(r.Body)
			if json.Unmarshal(body, &req) != nil || strings.Contains(req.ID, "-retry-") {
				r.Body = io.NopCloser(bytes.NewReader(body))
				break
			}
			// A first attempt: this trainer takes it and fails it.
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
			return
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/jobs/"):
			id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
			if strings.Contains(id, "-retry-") {
				break
			}
			failed.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":%q,"state":"failed","error":"CUDA out of memory"}`, id)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	a := startReplica(t, 1)
	cfg := fleetConfig(t, "rj", "per-step", srv.URL, a.srv.URL)
	opts := options(t)
	ctx := context.Background()
	if err := MustOpen(t, cfg, opts).Play(ctx); !errors.Is(err, trainer.ErrJobFailed) {
		t.Fatalf("Play: %v, want the failed job", err)
	}
	reopen := func(retry bool) error {
		o := opts
		o.RetryEndedJob = retry
		r, err := run.Reopen(ctx, "rj", o)
		if err != nil {
			t.Fatalf("Reopen: %v", err)
		}
		defer r.Close()
		return r.Play(ctx)
	}
	if err := reopen(false); !errors.Is(err, trainer.ErrJobFailed) {
		t.Fatalf("plain reopen: %v, want the failed job again", err)
	}
	if err := reopen(true); !errors.Is(err, trainer.ErrJobFailed) || !strings.Contains(err.Error(), "step 2") {
		// Step 1 is retried; step 2's first attempt fails in turn.
		t.Fatalf("reopen with RetryEndedJob: %v, want step 1 retried and step 2's job failed", err)
	}
	_, steps, _, err := opts.Store.Snapshot(ctx, "rj")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || steps[1].Job == nil || !strings.HasSuffix(steps[1].Job.ID, "/step-0001-retry-2") {
		t.Fatalf("steps after the retry: %d, step 1's job %+v; want step 1 committed by its -retry-2 job", len(steps), steps[1].Job)
	}
	if n := failed.Load(); n < 3 {
		t.Errorf("%d polls answered failed; want the first run's, the plain reopen's and the retrying reopen's at least", n)
	}
	if got := state(t, opts.Store, "rj").State; got != checkpoint.StateFailed {
		t.Fatalf("state %s, want failed at step 2", got)
	}
}
