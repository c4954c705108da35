package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// failFirstJob fronts the reference backend: step 1's first job (its id
// ends in /step-0001, no -retry-N) is answered here alone, accepted and
// then failed, as a trainer that ran out of memory would; every other
// request reaches the backend. It records the job ids created.
type failFirstJob struct {
	mu      sync.Mutex
	created []string
}

func (f *failFirstJob) handler(real http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
		if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct{ ID string }
			json.Unmarshal(body, &req)
			id = req.ID
			f.mu.Lock()
			f.created = append(f.created, id)
			f.mu.Unlock()
		}
		if !strings.HasPrefix(r.URL.Path, "/v1/jobs") || !strings.HasSuffix(id, "/step-0001") {
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

func (f *failFirstJob) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.created...)
}

// TestResumeFailedRunWithRetryJob: a daemon's run whose step's trainer
// job failed is played again by POST .../resume without stopping the
// daemon. A plain resume reattaches the failed job and fails the same
// way; {"retry_job": true} submits it again under the next attempt's id
// and the run succeeds with every step once. Bad bodies and runs that
// cannot be resumed are refused, naming why.
func TestResumeFailedRunWithRetryJob(t *testing.T) {
	b := refBackend(t)
	front := &failFirstJob{}
	ref := httptest.NewServer(front.handler(b.Handler()))
	defer ref.Close()

	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	launch(t, base, "", `run: {name: rj, steps: 2}
inference: {endpoints: [{url: `+ref.URL+`/v1}], model: refmodel}
trainer: {kind: jobs, url: `+ref.URL+`, base_model: refmodel}
validation: {episodes: 2}
`)
	r := waitRun(t, base, "rj", "the failed job to end the run", finished)
	if r.State != checkpoint.StateFailed || !strings.Contains(r.Error, "CUDA out of memory") || !strings.Contains(r.Error, `POST /api/v1/runs/RUN/resume with {"retry_job": true}`) {
		t.Fatalf("after the failed job: state %s, error %q; want failed, naming the trainer's error and the API's retry", r.State, r.Error)
	}

	resume := func(body string) (int, []byte) {
		return do(t, "POST", base+"/api/v1/runs/rj/resume", "", body)
	}
	for _, body := range []string{`{"retry": true}`, `{"retry_job": "yes"}`, `[`} {
		if code, got := resume(body); code != http.StatusBadRequest || !contains(got, `want {\"retry_job\": true|false}, optional`) {
			t.Fatalf("resume with body %s = %d %s; want 400 naming the body's form", body, code, got)
		}
	}

	// A plain resume reattaches the job the trainer failed: it fails again.
	if code, got := resume(""); code != http.StatusOK {
		t.Fatalf("plain resume = %d %s, want 200", code, got)
	}
	r = waitRun(t, base, "rj", "the plain resume to end", finished)
	if r.State != checkpoint.StateFailed || !strings.Contains(r.Error, "CUDA out of memory") {
		t.Fatalf("after a plain resume: state %s, error %q; want failed again", r.State, r.Error)
	}
	if n := len(front.ids()); n != 2 { // step 1's job, created once, reattached once
		t.Fatalf("job creates after a plain resume: %q; want step 1's job twice (the same id)", front.ids())
	}

	if code, got := resume(`{"retry_job": true}`); code != http.StatusOK {
		t.Fatalf("resume with retry_job = %d %s, want 200", code, got)
	}
	r = waitRun(t, base, "rj", "the retried run to end", finished)
	if r.State != checkpoint.StateSucceeded || len(r.Steps) != 3 {
		t.Fatalf("after resume with retry_job: state %s (%q), %d steps; want succeeded with steps 0..2", r.State, r.Error, len(r.Steps))
	}
	for i, st := range r.Steps {
		if st.Step != i {
			t.Fatalf("steps %+v: step %d stored as %d", r.Steps, i, st.Step)
		}
	}
	ids := front.ids()
	// The retry reattaches the job first, finds it failed, then submits
	// it again under the next attempt's id.
	if len(ids) != 5 || ids[1] != ids[0] || ids[2] != ids[0] || ids[3] != ids[0]+"-retry-2" || !strings.HasSuffix(ids[4], "/step-0002") {
		t.Fatalf("job creates %q; want step 1's job three times (created, reattached twice), its retry -retry-2, then step 2's", ids)
	}

	if code, got := resume(""); code != http.StatusConflict || !contains(got, "run rj succeeded: nothing to resume") {
		t.Fatalf("resume of a succeeded run = %d %s, want 409", code, got)
	}
	if code, got := do(t, "POST", base+"/api/v1/runs/nosuch/resume", "", ""); code != http.StatusNotFound {
		t.Fatalf("resume of an unknown run = %d %s, want 404", code, got)
	}
}

// TestResumeCancelledRun: a run cancelled through the API is played again
// by POST .../resume, from its last committed step, with the crash-loop
// guard's count cleared; a second resume while it plays is 409.
func TestResumeCancelledRun(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	launch(t, base, "", smallRun("again", 8))
	waitRun(t, base, "again", "step 1", func(r runJSON) bool { return len(r.Steps) >= 2 })
	if code, body := do(t, "POST", base+"/api/v1/runs/again/cancel", "", ""); code != http.StatusOK {
		t.Fatalf("cancel = %d %s", code, body)
	}
	before := getRun(t, base, "again")
	if before.State != checkpoint.StateCancelled || len(before.Steps) >= 9 {
		t.Fatalf("after cancel: state %s with %d steps; want cancelled before the end", before.State, len(before.Steps))
	}

	// Starts the crash-loop guard counted (a daemon that died playing the
	// run) are forgiven by a resume by hand.
	ctx := context.Background()
	for range 2 {
		if _, err := e.store.CountStart(ctx, "again"); err != nil {
			t.Fatal(err)
		}
	}
	code, body := do(t, "POST", base+"/api/v1/runs/again/resume", "", "")
	if code != http.StatusOK {
		t.Fatalf("resume = %d %s, want 200", code, body)
	}
	if n, err := e.store.Starts(ctx, "again"); err != nil || n != 0 {
		t.Fatalf("failed starts after a resume by hand = %d, %v; want 0", n, err)
	}
	var r runJSON
	if err := json.Unmarshal(body, &r); err != nil || r.Run != "again" || !r.Hosted || r.State != checkpoint.StateRunning {
		t.Fatalf("resume answered %s (%v); want the run, hosted and running", body, err)
	}
	if code, body := do(t, "POST", base+"/api/v1/runs/again/resume", "", ""); code != http.StatusConflict || !contains(body, "run again is playing in this daemon already") {
		t.Fatalf("second resume while it plays = %d %s, want 409", code, body)
	}
	r = waitRun(t, base, "again", "finish", finished)
	if r.State != checkpoint.StateSucceeded || len(r.Steps) != 9 {
		t.Fatalf("after resume: state %s (%q), %d steps; want succeeded with 9", r.State, r.Error, len(r.Steps))
	}
	for i, st := range r.Steps {
		if st.Step != i {
			t.Fatalf("step %d stored as %d", i, st.Step)
		}
	}
}
