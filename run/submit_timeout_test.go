package run_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/trainer"
)

// TestTrainerCreateHangs (issue 13): a trainer that is healthy but never
// answers its job create fails the run within trainer.job_timeout (1s
// here), naming the trainer URL and the timeout, instead of minutes of
// 30 s attempts whatever job_timeout said. Only "returned before a 60 s
// test deadline" is checked, not the wall time.
func TestTrainerCreateHangs(t *testing.T) {
	release := make(chan struct{})
	tr := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		if r.URL.Path == "/healthz" {
			w.Write([]byte("ok"))
			return
		}
		http.NotFound(w, r)
	}))
	defer tr.Close()
	defer close(release)
	a := startReplica(t, 1)
	cfg := fleetConfig(t, "hung-create", "per-step", tr.URL, a.srv.URL)
	cfg.Run.Steps = 1
	cfg.Trainer.JobTimeout = config.Duration(time.Second)
	r := MustOpen(t, cfg, options(t))
	done := make(chan error, 1)
	go func() { done <- r.Play(context.Background()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Play still running 60 s after a job create that hangs, with trainer.job_timeout 1s")
	}
	if !errors.Is(err, trainer.ErrSubmitTimeout) {
		t.Fatalf("Play: %v; want ErrSubmitTimeout", err)
	}
	for _, want := range []string{tr.URL + "/v1/jobs", "job timeout 1s", "trainer.job_timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}
