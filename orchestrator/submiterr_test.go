package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/trainer"
)

// TestSubmitErrorSaysItOnce: a trainer that refuses a job's create makes
// the run fail with the client's error as it is, "submit trainer job ID:
// ..." once, not wrapped again in the same words.
func TestSubmitErrorSaysItOnce(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "lora rank 0 is not allowed", http.StatusBadRequest)
	}))
	t.Cleanup(srv.Close)
	e.trainer = trainer.NewJobClient(srv.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond})
	err := e.orchestrator(nil).Start(context.Background(), smallConfig(t, "s", 1))
	if err == nil {
		t.Fatal("the run succeeded with a trainer that refuses every job")
	}
	run, _, _ := snapshot(t, e.store, "s")
	id := "s." + run.ID + "/step-0001"
	want := "step 1: submit trainer job " + id + ": POST " + srv.URL + "/v1/jobs: 400 Bad Request: \"lora rank 0 is not allowed\""
	if got := err.Error(); got != want {
		t.Fatalf("err = %q\nwant  %q", got, want)
	}
}

// TestResubmitErrorSaysItOnce: a trainer that lost a job (404 on its
// poll) and then refuses it submitted again fails the run with the
// client's error once, not as "trainer job ID: submit trainer job ID: ...".
func TestResubmitErrorSaysItOnce(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost && posts == 0:
			posts++
			var req trainer.JobRequest
			jsonDecode(r, &req)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprintf(w, `{"id":%q,"state":"queued"}`, req.ID)
		case r.Method == http.MethodPost:
			http.Error(w, "no more jobs", http.StatusBadRequest)
		default:
			http.Error(w, "no such job", http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	e.trainer = trainer.NewJobClient(srv.URL, trainer.JobClientOptions{PollInterval: 5 * time.Millisecond})
	err := e.orchestrator(nil).Start(context.Background(), smallConfig(t, "s", 1))
	if err == nil {
		t.Fatal("the run succeeded with a trainer that lost its job")
	}
	run, _, _ := snapshot(t, e.store, "s")
	id := "s." + run.ID + "/step-0001"
	want := "step 1: submit trainer job " + id + ": POST " + srv.URL + "/v1/jobs: 400 Bad Request: \"no more jobs\""
	if got := err.Error(); got != want {
		t.Fatalf("err = %q\nwant  %q", got, want)
	}
}
