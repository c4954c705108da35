package orchestrator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/trainer"
)

// failingJobs fronts the reference backend's trainer: the jobs whose ids
// it is told to fail are answered by it alone (202 to the create, then
// "failed"), as a trainer that failed them would; every other request
// reaches the real trainer. It records the create bodies by job id.
type failingJobs struct {
	mu      sync.Mutex
	fail    map[string]bool
	created map[string][]byte
}

func (f *failingJobs) handler(real http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id string
		var body []byte
		if r.Method == http.MethodPost {
			body, _ = io.ReadAll(r.Body)
			var req trainer.JobRequest
			if err := jsonDecode(&http.Request{Body: io.NopCloser(bytes.NewReader(body))}, &req); err == nil {
				id = req.ID
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		} else {
			id = strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		}
		f.mu.Lock()
		failing := f.fail[id]
		if body != nil {
			f.created[id] = body
		}
		f.mu.Unlock()
		if !failing {
			real.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, id)
			return
		}
		fmt.Fprintf(w, `{"id":%q,"state":"failed","error":"CUDA out of memory"}`, id)
	})
}

// TestRetryEndedJob: a run whose step's job failed fails again on a plain
// resume; resumed with Options.RetryEndedJob it submits the same job
// (rollouts and output adapter) under the next attempt's id, recorded
// first as the in-flight job, and goes on; a retry that fails too fails
// the run naming its id, and the next retry takes the id after it.
func TestRetryEndedJob(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	f := &failingJobs{fail: map[string]bool{}, created: map[string][]byte{}}
	srv := httptest.NewServer(f.handler(e.backend.TrainerHandler()))
	t.Cleanup(srv.Close)
	e.trainer = trainer.NewJobClient(srv.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond})
	cfg := smallConfig(t, "rj", 2)
	ctx := context.Background()

	// The run's id is drawn when it is stored: fail step 1's job by the
	// name it will have, learnt from the store once the run exists.
	runID := func() string {
		run, _, _ := snapshot(t, e.store, "rj")
		return run.ID
	}
	events := func(ev orchestrator.Event) {
		if ev.Type == orchestrator.EventRunStarted {
			f.mu.Lock()
			f.fail[trainer.JobID(trainer.JobKey("rj", runID()), 1)] = true
			f.mu.Unlock()
		}
	}
	if err := e.orchestrator(events).Start(ctx, cfg); !errors.Is(err, trainer.ErrJobFailed) {
		t.Fatalf("start: err = %v, want the failed job", err)
	}
	first := trainer.JobID(trainer.JobKey("rj", runID()), 1)
	retry2, retry3 := first+"-retry-2", first+"-retry-3"

	resume := func(retry bool) error {
		o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: e.trainer, Adapters: e.fleet, RetryEndedJob: retry})
		return o.Resume(ctx, "rj")
	}
	inFlight := func() string {
		inf, err := e.store.GetInFlight(ctx, "rj")
		if err != nil || inf == nil {
			t.Fatalf("in-flight record: %+v, %v", inf, err)
		}
		return inf.JobID
	}

	// A plain resume reattaches the failed job and fails the same way.
	if err := resume(false); !errors.Is(err, trainer.ErrJobFailed) || !strings.Contains(err.Error(), first+" failed") || !strings.Contains(err.Error(), "resume with --retry-job") {
		t.Fatalf("plain resume: err = %v", err)
	}
	// The retry fails too: the run fails naming it, and it is the
	// in-flight job now.
	f.mu.Lock()
	f.fail[retry2] = true
	f.mu.Unlock()
	if err := resume(true); !errors.Is(err, trainer.ErrJobFailed) || !strings.Contains(err.Error(), retry2+" failed") {
		t.Fatalf("resume with a failing retry: err = %v", err)
	}
	if got := inFlight(); got != retry2 {
		t.Fatalf("in-flight job after a failed retry = %s, want %s", got, retry2)
	}
	// The next retry trains on the real trainer and the run goes on.
	if err := resume(true); err != nil {
		t.Fatalf("resume with a retry: %v", err)
	}
	run, steps, _ := snapshot(t, e.store, "rj")
	if run.State != checkpoint.StateSucceeded || len(steps) != 3 {
		t.Fatalf("after the retry: state %s, %d steps; want succeeded with steps 0-2", run.State, len(steps))
	}
	if steps[1].Job == nil || steps[1].Job.ID != retry3 || steps[1].Adapter == nil || steps[1].Adapter.Name != trainer.AdapterName(trainer.JobKey("rj", run.ID), 1) {
		t.Fatalf("step 1's job %+v, adapter %+v; want job %s with the step's own adapter name", steps[1].Job, steps[1].Adapter, retry3)
	}
	// Every attempt carried the same job but for its id.
	f.mu.Lock()
	defer f.mu.Unlock()
	sameButID := func(id string) string {
		return strings.Replace(string(f.created[id]), fmt.Sprintf("%q", id), `"ID"`, 1)
	}
	if len(f.created[first]) == 0 || sameButID(first) != sameButID(retry2) || sameButID(first) != sameButID(retry3) {
		t.Errorf("the retries' requests differ from the first attempt's but for the id:\nfirst  %.300s\nretry3 %.300s", sameButID(first), sameButID(retry3))
	}
}
