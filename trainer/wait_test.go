package trainer

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestJobClient_Wait_Success(t *testing.T) {
	done := Job{State: StateSucceeded, Progress: 1,
		Metrics: &Metrics{Loss: 0.5}, Adapter: &Adapter{Name: "r-step-0001", Path: "/a/r-step-0001"}}
	f, srv := newFakeTrainer(t,
		Job{State: StateQueued},
		Job{State: StateQueued},
		Job{State: StateRunning, Progress: 0.5},
		Job{State: StateRunning, Progress: 0.5},
		Job{State: StateRunning, Progress: 0.5},
		Job{State: StateRunning, Progress: 0.75},
		done,
	)
	c := NewJobClient(srv.URL, fastOptions())
	var updates []string
	job, err := c.Wait(context.Background(), "r/step-0001", time.Minute, func(j Job) {
		updates = append(updates, j.State)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := job.Adapter.Path, "/a/r-step-0001"; got != want {
		t.Fatalf("adapter path=%q, want %q", got, want)
	}
	if got, want := job.Metrics.Loss, 0.5; got != want {
		t.Fatalf("loss=%v, want %v", got, want)
	}
	// Only changes are reported: queued, running 0.5, running 0.75, succeeded.
	if got, want := strings.Join(updates, ","), "queued,running,running,succeeded"; got != want {
		t.Fatalf("updates=%s, want %s", got, want)
	}
	if _, gets, deletes := f.counts(); gets != 7 || deletes != 0 {
		t.Fatalf("gets=%d deletes=%d, want 7 and 0", gets, deletes)
	}
}

func TestJobClient_Wait_Failed(t *testing.T) {
	_, srv := newFakeTrainer(t,
		Job{State: StateRunning, Progress: 0.1},
		Job{State: StateFailed, Progress: 0.1, Error: "CUDA out of memory"},
	)
	c := NewJobClient(srv.URL, fastOptions())
	job, err := c.Wait(context.Background(), "r/step-0002", time.Minute, nil)
	if !errors.Is(err, ErrJobFailed) {
		t.Fatalf("Wait()=%v, want ErrJobFailed", err)
	}
	if errors.Is(err, ErrJobCancelled) {
		t.Fatal("a failed job matches ErrJobCancelled")
	}
	var je *JobError
	if !errors.As(err, &je) {
		t.Fatalf("Wait()=%T, want *JobError", err)
	}
	if got, want := *je, (JobError{ID: "r/step-0002", State: StateFailed, Message: "CUDA out of memory"}); got != want {
		t.Fatalf("JobError=%+v, want %+v", got, want)
	}
	if got, want := job.State, StateFailed; got != want {
		t.Fatalf("job state=%q, want %q", got, want)
	}
}

func TestJobClient_Wait_CancelledElsewhere(t *testing.T) {
	_, srv := newFakeTrainer(t, Job{State: StateCancelled})
	_, err := NewJobClient(srv.URL, fastOptions()).Wait(context.Background(), "r/step-0002", time.Minute, nil)
	if !errors.Is(err, ErrJobCancelled) || errors.Is(err, ErrJobFailed) {
		t.Fatalf("Wait()=%v, want ErrJobCancelled only", err)
	}
}

// TestJobClient_Wait_Timeout: a job still running at the timeout is
// cancelled, and the error names the job, the timeout and the last state
// seen. The timeout must outlast the first poll, or no state is seen
// ("still unknown"): a loopback round trip takes well under a millisecond,
// but a loaded CI machine running -race took longer than the 30ms this
// test once gave it. 2s leaves that poll room; the wait lasts as long.
func TestJobClient_Wait_Timeout(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateRunning, Progress: 0.3})
	c := NewJobClient(srv.URL, fastOptions())
	job, err := c.Wait(context.Background(), "r/step-0004", 2*time.Second, nil)
	if !errors.Is(err, ErrJobTimeout) {
		t.Fatalf("Wait()=%v, want ErrJobTimeout", err)
	}
	for _, want := range []string{"r/step-0004", "after 2s", "running"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if got, want := job.State, StateRunning; got != want {
		t.Fatalf("last state=%q, want %q", got, want)
	}
	reqs, _, deletes := f.counts()
	if got, want := deletes, 1; got != want {
		t.Fatalf("deletes=%d, want %d", got, want)
	}
	if got, want := reqs[len(reqs)-1], "DELETE /v1/jobs/r/step-0004"; got != want {
		t.Fatalf("last request=%q, want %q", got, want)
	}
}

func TestJobClient_Wait_ContextCancelLeavesJob(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateRunning, Progress: 0.3})
	c := NewJobClient(srv.URL, fastOptions())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := c.Wait(ctx, "r/step-0005", time.Minute, func(Job) { cancel() })
	if !errors.Is(err, context.Canceled) || err.Error() != "wait for trainer job r/step-0005: context canceled" {
		t.Fatalf("Wait()=%v, want context.Canceled, the job named", err)
	}
	if errors.Is(err, ErrJobTimeout) {
		t.Fatal("a cancelled wait reports a timeout")
	}
	if _, _, deletes := f.counts(); deletes != 0 {
		t.Fatalf("deletes=%d, want 0: a cancelled wait must leave the job running", deletes)
	}

	// Reattach: a new Wait on the same id picks the job up again.
	f.mu.Lock()
	f.states = append(f.states, Job{State: StateSucceeded, Progress: 1})
	f.mu.Unlock()
	job, err := c.Wait(context.Background(), "r/step-0005", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := job.State, StateSucceeded; got != want {
		t.Fatalf("reattached state=%q, want %q", got, want)
	}
}

func TestJobClient_Wait_TransientPollErrors(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateSucceeded, Progress: 1})
	f.failFirst = 4 // more than Retries: Wait counts its own poll errors
	c := NewJobClient(srv.URL, fastOptions())
	job, err := c.Wait(context.Background(), "r/step-0006", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := job.State, StateSucceeded; got != want {
		t.Fatalf("state=%q, want %q", got, want)
	}
	if reqs, _, _ := f.counts(); len(reqs) != 5 {
		t.Fatalf("requests=%d, want 5", len(reqs))
	}
}

func TestJobClient_Wait_TooManyPollErrors(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateSucceeded})
	f.failFirst, f.failStatus = 100, http.StatusBadGateway
	opts := fastOptions()
	opts.MaxPollErrors = 3
	_, err := NewJobClient(srv.URL, opts).Wait(context.Background(), "r/step-0007", time.Minute, nil)
	if err == nil {
		t.Fatal("Wait() succeeded against a failing trainer")
	}
	if !strings.Contains(err.Error(), "4 polls failed in a row") || !strings.Contains(err.Error(), "502") {
		t.Fatalf("error %q does not explain the failed polls", err)
	}
	if reqs, _, deletes := f.counts(); len(reqs) != 4 || deletes != 0 {
		t.Fatalf("requests=%d deletes=%d, want 4 and 0", len(reqs), deletes)
	}
}

func TestJobClient_Wait_NotFoundIsPermanent(t *testing.T) {
	f, srv := newFakeTrainer(t)
	_, err := NewJobClient(srv.URL, fastOptions()).Wait(context.Background(), "r/step-0008", time.Minute, nil)
	if !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("Wait()=%v, want ErrJobNotFound", err)
	}
	if reqs, _, _ := f.counts(); len(reqs) != 1 {
		t.Fatalf("requests=%d, want 1", len(reqs))
	}
}

// TestJobClient_Wait_RidesOutTrainerOutage (issue 13): with PollOutage,
// polls that keep failing past MaxPollErrors are tolerated until the
// first failure is PollOutage old — a trainer restarting for longer than
// a few polls is not a failed step — and then Wait gives up naming both.
func TestJobClient_Wait_RidesOutTrainerOutage(t *testing.T) {
	t.Run("outage shorter than the window", func(t *testing.T) {
		f, srv := newFakeTrainer(t, Job{State: StateSucceeded, Progress: 1})
		f.failFirst, f.failStatus = 8, http.StatusServiceUnavailable
		opts := fastOptions()
		opts.MaxPollErrors, opts.PollOutage = 3, time.Minute
		job, err := NewJobClient(srv.URL, opts).Wait(context.Background(), "r/step-0008", time.Minute, nil)
		if err != nil {
			t.Fatalf("Wait() failed within the outage window: %v", err)
		}
		if job.State != StateSucceeded {
			t.Fatalf("state=%q, want %q", job.State, StateSucceeded)
		}
		if reqs, _, _ := f.counts(); len(reqs) != 9 {
			t.Fatalf("requests=%d, want 9 (8 failed polls, then the answer)", len(reqs))
		}
	})
	t.Run("outage longer than the window", func(t *testing.T) {
		f, srv := newFakeTrainer(t, Job{State: StateSucceeded})
		f.failFirst, f.failStatus = 1000000, http.StatusServiceUnavailable
		opts := fastOptions()
		opts.MaxPollErrors, opts.PollOutage = 3, 100*time.Millisecond
		start := time.Now()
		_, err := NewJobClient(srv.URL, opts).Wait(context.Background(), "r/step-0009", time.Minute, nil)
		if err == nil {
			t.Fatal("Wait() succeeded against a trainer that never answers")
		}
		if time.Since(start) < 100*time.Millisecond {
			t.Fatalf("gave up after %v, before the 100ms outage window", time.Since(start))
		}
		if !strings.Contains(err.Error(), "polls failed in a row over") || !strings.Contains(err.Error(), "503") {
			t.Fatalf("error %q does not explain the failed polls", err)
		}
		if reqs, _, _ := f.counts(); len(reqs) < 4 {
			t.Fatalf("requests=%d, want more than MaxPollErrors", len(reqs))
		}
	})
}
