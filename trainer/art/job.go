package art

import (
	"context"
	"fmt"
	"slices"

	"github.com/grpo-dev/grpo/trainer"
)

// RunJob trains one grpo step given as a job API request and answers in the
// job API's terms, so that ART can stand behind the orchestrator's trainer
// seam. It runs synchronously: ART has no job ids or queue.
//
// req.BaseModel and req.LoRA must match m (ART fixes them at its first
// training call); req.ParentAdapter and req.OutputAdapter are not sent,
// since ART trains on from its own latest checkpoint and names the result
// itself: the returned job's adapter is InferenceModel at ART's new step,
// with no path. req.Trajectories must include the zero-advantage ones (see
// TrainGroups). onUpdate, if not nil, sees a running job after each
// gradient step. Its errors name the job ("ART job ID: ...").
func (c *Client) RunJob(ctx context.Context, m Model, req trainer.JobRequest, onUpdate func(trainer.Job)) (trainer.Job, TrainResult, error) {
	job := trainer.Job{ID: req.ID, State: trainer.StateRunning}
	fail := func(err error) (trainer.Job, TrainResult, error) {
		job.State, job.Error = trainer.StateFailed, err.Error()
		return job, TrainResult{}, err
	}
	if req.BaseModel != "" && req.BaseModel != m.BaseModel {
		return fail(fmt.Errorf("ART job %s: base model %q differs from the registered %q", req.ID, req.BaseModel, m.BaseModel))
	}
	if req.LoRA.Rank != 0 && (req.LoRA.Rank != m.LoRA.Rank || req.LoRA.Alpha != m.LoRA.Alpha || !slices.Equal(req.LoRA.TargetModules, m.LoRA.TargetModules)) {
		return fail(fmt.Errorf("ART job %s: LoRA %+v differs from the registered %+v; ART fixes it when the model is first trained", req.ID, req.LoRA, m.LoRA))
	}
	cfg, err := TrainConfigFrom(req.Hyperparameters)
	if err != nil {
		return fail(fmt.Errorf("ART job %s: %w", req.ID, err))
	}
	p, err := c.protocol(ctx)
	if err != nil {
		return fail(fmt.Errorf("ART job %s: %w", req.ID, err))
	}
	groups, err := TrainGroups(req.Trajectories, p)
	if err != nil {
		return fail(fmt.Errorf("ART job %s: %w", req.ID, err))
	}
	var progress func(Metrics)
	if onUpdate != nil {
		progress = func(l Metrics) {
			j := job
			if l.GradientSteps > 0 {
				j.Progress = min(1, float64(l.GradientStep)/float64(l.GradientSteps))
			}
			j.Metrics = &trainer.Metrics{Loss: l.Loss, KL: l.KL, GradNorm: l.GradNorm}
			onUpdate(j)
		}
	}
	res, err := c.Train(ctx, m, groups, cfg, progress)
	if err != nil {
		job.State, job.Error = trainer.StateFailed, err.Error()
		return job, res, fmt.Errorf("ART job %s: %w", req.ID, err)
	}
	name, err := c.InferenceModel(ctx, m, res.StepAfter)
	if err != nil {
		return fail(fmt.Errorf("ART job %s: %w", req.ID, err))
	}
	metrics := res.Metrics
	job.State, job.Progress, job.Metrics = trainer.StateSucceeded, 1, &metrics
	job.Adapter = &trainer.Adapter{Name: name}
	return job, res, nil
}
