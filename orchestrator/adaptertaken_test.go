package orchestrator_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/trainer"
)

// squattingTrainer has another job make the output adapter of step 1's
// job first (another run whose adapter names are the same: two runs
// named a/b and a.b, stored without ids), then submits the run's job.
type squattingTrainer struct{ *trainer.JobClient }

func (s squattingTrainer) Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error) {
	if strings.HasSuffix(req.ID, "/step-0001") {
		squat := trainer.JobRequest{ID: "squatter/step-0001", OutputAdapter: req.OutputAdapter, Trajectories: req.Trajectories}
		if _, err := s.JobClient.Submit(ctx, squat); err != nil {
			return trainer.Job{}, err
		}
		if _, err := s.JobClient.Wait(ctx, squat.ID, time.Minute, nil); err != nil {
			return trainer.Job{}, err
		}
	}
	return s.JobClient.Submit(ctx, req)
}

// TestAdapterOfAnotherJobFailsTheRun: the embedded trainer refuses (409)
// a job whose output_adapter another job made, and the run fails at that
// step with the trainer's words, naming the adapter and the job that made
// it; the trainer replaced the other job's adapter in silence.
func TestAdapterOfAnotherJobFailsTheRun(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, filepath.Join(dir, "data"), filepath.Join(dir, "grpo.db"))
	o := orchestrator.New(orchestrator.Options{Store: e.store, Completer: e.chat, Trainer: squattingTrainer{e.trainer}, Adapters: e.fleet})
	err := o.Start(context.Background(), smallConfig(t, "s", 2))
	run, steps, _ := snapshot(t, e.store, "s")
	key := trainer.JobKey("s", run.ID)
	name := trainer.AdapterName(key, 1)
	// The trainer's URL (httptest's port) is between the two.
	head := "step 1: submit trainer job " + trainer.JobID(key, 1) + ": POST http://127.0.0.1:"
	tail := "/v1/jobs: 409 Conflict: " +
		`output_adapter "` + name + `" is taken: job "squatter/step-0001" made it (` + e.backend.AdapterDir(name) + `); ` +
		`a job does not replace another job's adapter: give this job another output_adapter`
	if err == nil || !strings.HasPrefix(err.Error(), head) || !strings.HasSuffix(err.Error(), tail) ||
		strings.Contains(strings.TrimSuffix(strings.TrimPrefix(err.Error(), head), tail), " ") {
		t.Fatalf("err = %v\nwant  %sPORT%s", err, head, tail)
	}
	if run.State != checkpoint.StateFailed || run.Error != err.Error() || len(steps) != 1 {
		t.Fatalf("run %s (%q) with %d steps; want failed with the error above and step 0 only", run.State, run.Error, len(steps))
	}
}
