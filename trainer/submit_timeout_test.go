package trainer

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// TestSubmitBoundedByJobTimeout: a trainer whose create never answers
// (or answers 503 forever) fails Submit within SubmitTimeout (the run's
// trainer.job_timeout), every attempt and wait included, with an error
// naming the trainer URL and the timeout. Before, only each attempt was
// bounded (30 s by default), so a hanging create took minutes whatever
// job_timeout said. Wall time is not measured: the test only checks that
// Submit returned before a 30 s deadline, far above the 1 s bound and
// below what one default attempt alone takes.
func TestSubmitBoundedByJobTimeout(t *testing.T) {
	release := make(chan struct{})
	var posts atomic.Int32
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hang.Close()
	defer close(release)
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer busy.Close()

	for _, c := range []struct {
		name string
		url  string
		opts JobClientOptions
	}{
		// Default request timeout (30 s per attempt), default retries.
		{"hanging create", hang.URL, JobClientOptions{SubmitTimeout: time.Second}},
		// Retries enough for minutes: the budget is the job timeout.
		{"503 forever", busy.URL, JobClientOptions{SubmitTimeout: time.Second,
			Retry: &httpx.Policy{Retries: 100000, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := NewJobClient(c.url, c.opts)
			done := make(chan error, 1)
			go func() {
				_, err := cl.Submit(context.Background(), testRequest(JobID("dp5", 1)))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Submit still running after 30 s with a 1s job timeout")
			}
			if err == nil {
				t.Fatal("Submit succeeded against a trainer that never accepts")
			}
			t.Log(err)
			if !errors.Is(err, ErrSubmitTimeout) {
				t.Errorf("error %v does not match ErrSubmitTimeout", err)
			}
			for _, want := range []string{"POST " + c.url + "/v1/jobs", "job timeout 1s", "trainer.job_timeout", "dp5/step-0001"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
	if posts.Load() == 0 {
		t.Error("the hanging trainer saw no create")
	}
}

// TestSubmitTimeoutLeavesCallerCancelAlone: a caller's own cancellation
// is reported as such, not as a job timeout.
func TestSubmitTimeoutLeavesCallerCancelAlone(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := NewJobClient(srv.URL, JobClientOptions{SubmitTimeout: time.Hour}).Submit(ctx, testRequest(JobID("dp5", 1)))
	if err == nil || errors.Is(err, ErrSubmitTimeout) {
		t.Fatalf("error %v; want the caller's deadline, not ErrSubmitTimeout", err)
	}
}
