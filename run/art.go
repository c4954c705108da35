package run

// This file wires OpenPipe ART (trainer.kind: art, DESIGN §5) behind the
// orchestrator's seams: ART's backend server trains and serves the run's
// only inference endpoint, the vLLM it starts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/trainer"
	"github.com/grpo-dev/grpo/trainer/art"
)

// ARTProject is the project grpo registers its models under in ART: ART
// keeps a run's checkpoints in <art path>/grpo/models/<run>/checkpoints.
const ARTProject = "grpo"

// artModel is the model ART trains for cfg: named after the run.
func artModel(cfg config.Config) art.Model {
	t := cfg.Trainer
	return art.Model{
		Name: cfg.Run.Name, Project: ARTProject, BaseModel: t.BaseModel,
		LoRA: trainer.LoRA{Rank: t.LoRA.Rank, Alpha: t.LoRA.Alpha, TargetModules: t.LoRA.TargetModules},
	}
}

// startART connects to ART's backend server: it checks its version and the
// advantage settings against it, registers the run's model (a new run must
// find it untrained), prepares ART's vLLM and uses it as the run's only
// inference endpoint. For a new run it sets inference.model to the name
// ART serves its step-0 checkpoint under, so the base model is validated
// there too.
func startART(ctx context.Context, cfg *config.Config, opts PeersOptions) (*Peers, error) {
	inf := cfg.Inference
	// One HTTP client for ART's backend and its vLLM, as for every other
	// peer; it sets no overall timeout (training answers for as long as it
	// runs).
	hc := opts.HTTPClient
	if hc == nil {
		hc = httpx.NewHTTPClient(inf.Concurrency, opts.Logger)
	}
	client, err := art.New(cfg.Trainer.URL, art.Options{HTTPClient: hc})
	if err != nil {
		return nil, fmt.Errorf("trainer.url: %w", err)
	}
	proto, err := client.Check(ctx)
	if err != nil {
		return nil, fmt.Errorf("ART trainer %s: %w", cfg.Trainer.URL, err)
	}
	if err := art.ValidateAdvantage(cfg.GRPO.Advantage, proto); err != nil {
		return nil, err
	}
	m := artModel(*cfg)
	// One `art run` per grpo run: ART kills its training and inference
	// processes when a second model name first trains or prepares.
	if other, err := client.Occupant(ctx, m); err != nil {
		return nil, err
	} else if other != "" {
		return nil, fmt.Errorf("ART trainer %s already serves model %q (another grpo run?): ART %s trains one model per `art run` and kills the running one's processes when another name starts, so run one `art run` per grpo run (on its own port and vLLM port), or resume that run", cfg.Trainer.URL, other, proto.Releases)
	}
	if err := client.Register(ctx, m); err != nil {
		return nil, err
	}
	if !opts.Resume {
		step, err := client.Step(ctx, m)
		if err != nil {
			return nil, err
		}
		if step != 0 {
			return nil, fmt.Errorf("ART already holds model %s/%s at step %d (trained by an earlier run of that name): a new run would train on from it; choose another run.name, or delete %s/models/%s under ART's art path", ARTProject, m.Name, step, ARTProject, m.Name)
		}
		if cfg.Inference.Model, err = client.InferenceModel(ctx, m, 0); err != nil {
			return nil, err
		}
	}
	base, key, err := client.Prepare(ctx, m)
	if err != nil {
		return nil, err
	}
	opts.Logger.Info("ART trainer ready", "art", cfg.Trainer.URL, "releases", proto.Releases, "inference", base)
	retry := retryPolicy(inf)
	admin := inference.NewAdminClient(base, inference.AdminOptions{APIKey: key, HTTPClient: hc, Retry: &retry})
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	err = admin.Probe(cctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("ART's inference endpoint %s: %w", base, err)
	}
	t := &artTrainer{client: client, model: m, proto: proto, logger: opts.Logger,
		before: map[string]int{}, done: map[string]trainer.Job{}, pending: map[string]trainer.JobRequest{}, running: map[string]context.CancelFunc{}}
	// ART's vLLM is the fleet's one endpoint: drained and waited for
	// through an outage like any other; adapters are ART's business.
	eps := []Endpoint{{URL: base, APIKey: key}}
	fleet := newFleet(eps, inf, hc, fleetOptions(*cfg, opts))
	fleet.Start(context.WithoutCancel(ctx))
	return &Peers{fleet: fleet, art: t, eps: eps}, nil
}

// artTrainer is ART behind the orchestrator's trainer seam. ART trains
// synchronously and has no job ids: Submit only decides whether the job
// already ran, and Wait trains. Resume: Before records ART's step b before
// a job is recorded in flight; the job is done once ART's step is above b.
type artTrainer struct {
	client *art.Client
	model  art.Model
	proto  art.Protocol
	logger *slog.Logger

	multiTurnWarned sync.Once

	mu      sync.Mutex
	before  map[string]int                // job id -> ART's step before training it
	done    map[string]trainer.Job        // jobs found trained by Submit
	pending map[string]trainer.JobRequest // submitted, not yet trained
	running map[string]context.CancelFunc
}

var (
	_ orchestrator.ResumableTrainer = (*artTrainer)(nil)
	_ orchestrator.CheckpointKeeper = (*artTrainer)(nil)
	_ orchestrator.ValidationLogger = (*artTrainer)(nil)
)

// artState is what is recorded with an in-flight job.
type artState struct {
	StepBefore int `json:"art_step_before"`
}

// Before reads ART's step, to be recorded with the job before it is sent.
func (t *artTrainer) Before(ctx context.Context, req trainer.JobRequest) (json.RawMessage, error) {
	step, err := t.client.Step(ctx, t.model)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.before[req.ID] = step
	t.mu.Unlock()
	return json.Marshal(artState{StepBefore: step})
}

// Reattach takes back the step recorded by Before after a restart. Its
// errors do not name the job: the orchestrator does ("reattach trainer
// job ID: ...").
func (t *artTrainer) Reattach(_ context.Context, req trainer.JobRequest, state json.RawMessage) error {
	var s artState
	if len(state) == 0 {
		return errors.New("no ART step was recorded with it, so whether ART trained it cannot be told; delete the run and start again")
	}
	if err := json.Unmarshal(state, &s); err != nil {
		return fmt.Errorf("recorded ART state %s: %w", state, err)
	}
	t.mu.Lock()
	t.before[req.ID] = s.StepBefore
	t.mu.Unlock()
	return nil
}

// stepBefore is the step recorded for job id.
func (t *artTrainer) stepBefore(id string) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.before[id]
	if !ok {
		return 0, fmt.Errorf("ART job %s: no step recorded before it (Before was not called)", id)
	}
	return b, nil
}

// finished reports job id done when ART's step has passed the one recorded
// before it: the job trained, before a restart or while grpo was away. Its
// errors name the job ("ART job ID: ...").
func (t *artTrainer) finished(ctx context.Context, id string) (trainer.Job, bool, error) {
	b, err := t.stepBefore(id)
	if err != nil {
		return trainer.Job{}, false, err
	}
	cur, err := t.client.Step(ctx, t.model)
	if err != nil {
		return trainer.Job{}, false, fmt.Errorf("ART job %s: %w", id, err)
	}
	switch {
	case cur < b:
		return trainer.Job{}, false, fmt.Errorf("ART job %s: ART's step %d is below the step %d recorded before training; were ART's checkpoints of %s removed?", id, cur, b, t.model.Name)
	case cur == b:
		return trainer.Job{}, false, nil
	}
	if cur > b+1 {
		t.logger.Warn("ART's step moved by more than one since the job was recorded: it trained this step more than once, or something else trains this model", "job", id, "before", b, "now", cur)
	}
	a, err := t.adapter(ctx, b+1)
	if err != nil {
		return trainer.Job{}, false, fmt.Errorf("ART job %s: %w", id, err)
	}
	return trainer.Job{ID: id, State: trainer.StateSucceeded, Progress: 1, Adapter: &a}, true, nil
}

// adapter is ART's checkpoint at step: the name its vLLM serves it under,
// and its directory relative to ART's art path (which holds the step).
func (t *artTrainer) adapter(ctx context.Context, step int) (trainer.Adapter, error) {
	name, err := t.client.InferenceModel(ctx, t.model, step)
	if err != nil {
		return trainer.Adapter{}, err
	}
	return trainer.Adapter{Name: name, Path: fmt.Sprintf("%s/models/%s/checkpoints/%04d", t.model.Project, t.model.Name, step)}, nil
}

// artStep is the ART step of an adapter named by adapter (nil: the base
// model, ART's step 0).
func artStep(a *trainer.Adapter) (int, error) {
	if a == nil {
		return 0, nil
	}
	i := strings.LastIndex(a.Path, "/checkpoints/")
	if i < 0 {
		return 0, fmt.Errorf("adapter %s: path %q is not an ART checkpoint directory", a.Name, a.Path)
	}
	return strconv.Atoi(a.Path[i+len("/checkpoints/"):])
}

// Submit answers the job as succeeded when ART already trained it, and as
// queued otherwise: Wait trains it. Its errors name the job.
func (t *artTrainer) Submit(ctx context.Context, req trainer.JobRequest) (trainer.Job, error) {
	job, ok, err := t.finished(ctx, req.ID)
	if err != nil {
		return trainer.Job{}, err
	}
	if ok {
		t.logger.Info("ART trained this job before a restart; not training it again", "job", req.ID, "adapter", job.Adapter.Name)
		t.mu.Lock()
		t.done[req.ID] = job
		t.mu.Unlock()
		return job, nil
	}
	t.mu.Lock()
	t.pending[req.ID] = req
	t.mu.Unlock()
	return trainer.Job{ID: req.ID, State: trainer.StateQueued}, nil
}

// Wait trains job id (sent to ART once: ART has no idempotency key) and
// returns it with the adapter ART serves at its new step. The request is
// the one Submit saw. When ctx ends or timeout passes, ART may still
// finish the step; a resumed run then finds it trained.
func (t *artTrainer) Wait(ctx context.Context, id string, timeout time.Duration, onUpdate func(trainer.Job)) (trainer.Job, error) {
	t.mu.Lock()
	job, done := t.done[id]
	req, pending := t.pending[id]
	delete(t.pending, id)
	delete(t.done, id)
	t.mu.Unlock()
	switch {
	case done:
		return job, nil
	case !pending:
		return trainer.Job{}, fmt.Errorf("ART job %s was not submitted", id)
	}
	// Last look before sending: a step that ART was still training when
	// grpo restarted may have finished since Submit.
	if job, ok, err := t.finished(ctx, id); err != nil {
		return trainer.Job{}, err
	} else if ok {
		return job, nil
	}
	b, err := t.stepBefore(id)
	if err != nil {
		return trainer.Job{}, err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.mu.Lock()
	t.running[id] = cancel
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.running, id)
		t.mu.Unlock()
	}()
	if n := art.MultiTurn(req.Trajectories); n > 0 && t.proto.TrainsMessages {
		t.multiTurnWarned.Do(func() {
			t.logger.Warn("ART "+t.proto.Releases+" trains each trajectory as one conversation: its earlier sampled turns are trained in the context the chat template renders for past turns, which differs from the one they were sampled in when the template treats past turns differently (Qwen3 drops their <think> block); ART 0.4.0 to 0.4.7 get each turn as its own history", "job", id, "multi_turn_trajectories", n)
		})
	}
	job, res, err := t.client.RunJob(ctx, t.model, req, onUpdate)
	if err != nil {
		return job, err
	}
	if len(res.NonFinite) > 0 {
		t.logger.Warn("ART streamed NaN or infinite metrics in this step (a diverged loss or gradient norm); they are left out of the step's metrics", "job", id, "lines_per_key", res.NonFinite)
	}
	if res.StepBefore != b {
		t.logger.Warn("ART's step changed between recording the job and training it: another step was trained meanwhile", "job", id, "recorded", b, "before_training", res.StepBefore)
	}
	if !res.Advanced() {
		return job, fmt.Errorf("ART job %s: ART's step stayed at %d: nothing in the step was trainable (ART 0.4.0 does not count such a step), so the run cannot tell it from a step not trained", id, res.StepAfter)
	}
	a, err := t.adapter(ctx, res.StepAfter)
	if err != nil {
		return job, fmt.Errorf("ART job %s: %w", id, err)
	}
	job.Adapter = &a
	if res.NothingTrainable {
		t.logger.Warn("ART trained nothing in this step (no group with a reward spread, or no choice with logprobs); it copied its last checkpoint to the next step", "job", id, "art_step", res.StepAfter)
	}
	return job, nil
}

// Cancel stops waiting for job id. ART itself cannot be told to stop.
func (t *artTrainer) Cancel(_ context.Context, id string) error {
	t.mu.Lock()
	cancel := t.running[id]
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return nil
}

// KeepCheckpoints deletes ART's checkpoints but the best step's and the
// recent steps' (ART also keeps its latest). ART cannot be told which to
// keep; nothing is deleted unless all are ART's latest.
func (t *artTrainer) KeepCheckpoints(ctx context.Context, best *trainer.Adapter, recent []trainer.Adapter) error {
	b, err := artStep(best)
	if err != nil {
		return err
	}
	keep := []int{b}
	for _, a := range recent {
		s, err := artStep(&a)
		if err != nil {
			return err
		}
		keep = append(keep, s)
	}
	kept, err := t.client.DeleteCheckpoints(ctx, t.model, keep)
	if errors.Is(err, art.ErrCannotKeep) {
		t.logger.Debug("ART checkpoints left in place", "reason", err)
		return nil
	}
	if err != nil {
		return err
	}
	t.logger.Debug("ART checkpoints kept", "steps", kept)
	return nil
}

// LogValidation records a validation with ART (POST /_log, split "val").
// A server without /_log gets nothing.
func (t *artTrainer) LogValidation(ctx context.Context, _ int, trajs []trainer.Trajectory) error {
	if !t.proto.Log {
		return nil
	}
	groups, err := art.LogGroups(trajs)
	if err != nil {
		return err
	}
	return t.client.Log(ctx, t.model, groups, "val")
}

// artAdapters is the Adapters seam with ART: ART loads every checkpoint
// into its vLLM itself, so nothing is loaded or unloaded by grpo.
type artAdapters struct{}

func (artAdapters) LoadEverywhere(context.Context, string, string) error { return nil }
func (artAdapters) UnloadEverywhere(context.Context, string) error       { return nil }
