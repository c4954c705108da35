package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// batch is one step's sampled groups, ready for the trainer.
type batch struct {
	n            int // table size
	stats        checkpoint.TrainStats
	trajectories []trainer.Trajectory
}

// runner plays split's episodes.
func (r *run) runner(split string) *rollout.Runner {
	return &rollout.Runner{Client: r.o.opts.Completer, Limit: r.limit(), OnCall: r.onCall[split], Replays: r.cfg.Inference.EpisodeReplays}
}

func (r *run) limit() *rollout.Limiter {
	if r.limiter == nil {
		r.limiter = rollout.NewLimiter(r.cfg.Inference.Concurrency)
	}
	return r.limiter
}

func (r *run) env(n int, seed int64) rollout.EnvConfig {
	e := r.cfg.Env
	return rollout.EnvConfig{N: n, Rounds: e.Rounds, Mode: e.Mode, DeadlockPatience: e.DeadlockPatience, Seed: seed}
}

func (r *run) sampling(temperature float64) rollout.Sampling {
	inf := r.cfg.Inference
	return rollout.Sampling{Temperature: float32(temperature), MaxTokens: inf.MaxTokens, ChatTemplateKwargs: inf.ChatTemplateKwargs}
}

func (r *run) reward() rollout.RewardConfig {
	return rollout.RewardConfig{Function: r.cfg.Reward.Function, Weights: r.cfg.Reward.Weights}
}

// groupSpecs builds the episodes of the group in seed slot `slot` of step s:
// one table seed, episodes differing only in their sampling seeds.
func (r *run) groupSpecs(s, slot, n int) (string, int64, []rollout.EpisodeSpec) {
	id := fmt.Sprintf("s%d-g%d", s, slot)
	seed := r.cfg.TrainSeed(s, slot)
	specs := make([]rollout.EpisodeSpec, r.cfg.GRPO.EpisodesPerGroup)
	for e := range specs {
		specs[e] = rollout.EpisodeSpec{
			ID: fmt.Sprintf("%s-e%d", id, e), Group: id, Model: r.model(),
			Env: r.env(n, seed), Reward: r.reward(), Sampling: r.sampling(r.cfg.Inference.Temperature),
			SampleSeed: rollout.RequestSeed(seed, e, -1),
		}
	}
	return id, seed, specs
}

// sample plays the step's groups with the model of pol, replacing
// zero-variance groups when asked (up to grpo.max_resamples), and
// assembles the trainer batch. It may run while earlier steps train
// (pipeline.go): it reads nothing of the run that they change.
func (r *run) sample(ctx context.Context, s, n int, pol policy) (*batch, error) {
	g := r.cfg.GRPO
	var (
		groups   []grpo.Group
		outcomes []grpo.GroupOutcome
		stats    []checkpoint.GroupStats
		all      []rollout.Episode
	)
	play := func(slots []int, resampled bool) error {
		var specs []rollout.EpisodeSpec
		ids, seeds := make([]string, len(slots)), make([]int64, len(slots))
		for i, slot := range slots {
			var sp []rollout.EpisodeSpec
			ids[i], seeds[i], sp = r.groupSpecs(s, slot, n)
			for j := range sp {
				sp[j].Model = pol.model
			}
			specs = append(specs, sp...)
		}
		eps := r.play(ctx, s, "train", specs)
		if err := ctx.Err(); err != nil {
			return err
		}
		all = append(all, eps...)
		for i := range slots {
			grp := grpo.Group{ID: ids[i], Seed: seeds[i], Episodes: eps[i*g.EpisodesPerGroup : (i+1)*g.EpisodesPerGroup]}
			out := grpo.Score(grp, g.Advantage)
			groups, outcomes = append(groups, grp), append(outcomes, out)
			stats = append(stats, checkpoint.GroupStats{ID: grp.ID, Seed: grp.Seed, N: n, Rewards: out.Rewards,
				Mean: out.Mean, Std: out.Std, ZeroVariance: out.ZeroVariance, Resampled: resampled})
		}
		return nil
	}
	first := make([]int, g.Groups)
	for i := range first {
		first[i] = i
	}
	if err := play(first, false); err != nil {
		return nil, err
	}
	zero := countZero(outcomes)
	if g.ResampleZeroVariance {
		next := g.Groups
		for {
			missing := 0
			for _, o := range outcomes {
				if !o.ZeroVariance {
					missing++
				}
			}
			missing = g.Groups - missing
			budget := g.Groups + g.MaxResamples - next
			if missing <= 0 || budget <= 0 {
				break
			}
			slots := make([]int, min(missing, budget))
			for i := range slots {
				slots[i] = next
				next++
			}
			if err := r.playMore(ctx, play, slots); err != nil {
				return nil, err
			}
		}
	}
	// Keep only groups with signal (plus counting the rest) for training.
	sum := grpo.SummarizeEpisodes(all)
	if sum.Errored == len(all) {
		return nil, fmt.Errorf("every training episode failed; first error: %s", all[0].Error)
	}
	if err := evaluate.CheckErrored(all, r.cfg.Inference.MaxErroredFraction, "training"); err != nil {
		return nil, fmt.Errorf("step %d: %w", s, err)
	}
	if sum.Errored > 0 {
		r.o.opts.Logger.Warn("training episodes errored after replays; their groups are left out", "run", r.name, "step", s, "errored", sum.Errored, "episodes", len(all), "first_error", firstError(all))
	}
	b := &batch{n: n, stats: checkpoint.TrainStats{
		RewardMean: sum.Reward.Mean, RewardStd: sum.Reward.Std,
		Episodes: sum.Episodes, Errored: sum.Errored,
		DeadlockRate: sum.DeadlockRate, MealsMean: sum.MealsMean, InvalidRate: sum.InvalidRate,
		ZeroVarianceGroups: zero, FracRewardZeroStd: float64(zero) / float64(g.Groups),
		Groups: stats,
	}}
	// ART recomputes group statistics from what it receives: it needs the
	// zero-advantage trajectories of the groups it trains on.
	trajs := grpo.TrajectoriesWith(groups, outcomes, grpo.TrajectoryOptions{KeepZeroAdvantage: r.cfg.Trainer.Kind == config.TrainerART})
	for i := range trajs {
		trajs[i].PolicyStep = &pol.step
	}
	b.trajectories = trainer.Trajectories(trajs)
	b.stats.Trajectories = len(b.trajectories)
	lag := s - 1 - pol.step
	b.stats.PolicyStep, b.stats.OffPolicyLag = &pol.step, &lag
	return b, nil
}

func (r *run) playMore(ctx context.Context, play func([]int, bool) error, slots []int) error {
	r.o.opts.Logger.Info("resampling zero-variance groups", "run", r.name, "groups", len(slots))
	return play(slots, true)
}

func countZero(outs []grpo.GroupOutcome) int {
	z := 0
	for _, o := range outs {
		if o.ZeroVariance {
			z++
		}
	}
	return z
}

// play runs episodes and reports each as it finishes.
func (r *run) play(ctx context.Context, s int, split string, specs []rollout.EpisodeSpec) []rollout.Episode {
	parallel := r.cfg.Inference.Concurrency/max(1, specs[0].Env.N) + 1
	return r.runner(split).RunAll(ctx, specs, parallel, func(_ int, ep rollout.Episode) {
		r.episodeFinished(s, split, ep)
	})
}

func (r *run) episodeFinished(s int, split string, ep rollout.Episode) {
	r.emit(Event{Type: EventEpisodeFinished, Step: s, EpisodeFinished: &EpisodeFinished{
		Split: split, ID: ep.Spec.ID, N: ep.Spec.Env.N, Reward: ep.Reward, Errored: ep.Errored,
		Deadlock: ep.Metrics.Deadlocked, Meals: ep.Metrics.TotalMeals, Invalid: ep.Metrics.Invalid,
		Calls: ep.Metrics.LLMCalls, Seconds: ep.Seconds,
	}})
}

func (r *run) jobRequest(s int, trajs []trainer.Trajectory) *trainer.JobRequest {
	t := r.cfg.Trainer
	var parent *trainer.Adapter
	if r.adapter != nil {
		a := *r.adapter
		parent = &a
	}
	h := t.Hyperparameters
	return &trainer.JobRequest{
		ID:            trainer.JobID(r.jobKey, s),
		BaseModel:     t.BaseModel,
		ParentAdapter: parent,
		OutputAdapter: trainer.AdapterName(r.jobKey, s),
		LoRA:          trainer.LoRA{Rank: t.LoRA.Rank, Alpha: t.LoRA.Alpha, TargetModules: t.LoRA.TargetModules},
		Hyperparameters: trainer.Hyperparameters{LearningRate: h.LearningRate, Epsilon: h.Epsilon, EpsilonHigh: h.EpsilonHigh, KLBeta: h.KLBeta, Epochs: h.Epochs,
			MiniBatches: h.MiniBatches, WarmupSteps: h.WarmupSteps, ResetOptimizer: h.ResetOptimizer},
		Trajectories: trajs,
	}
}

// retryHint says how to retry a step whose job ended in state: resuming
// asks the trainer for the same job id, which answers the ended job.
func (r *run) retryHint(state string) string {
	h := "a job id is never trained twice, so resuming fails the same way: to retry the step, "
	if r.retriable() {
		h += "resume with --retry-job (the step's job is submitted again under a new id; a daemon's run: POST /api/v1/runs/RUN/resume with {\"retry_job\": true}), or "
	}
	return h + "remove the " + state + " job from the trainer first; the embedded trainer keeps it in its data directory's jobs/"
}

// retriable reports whether an ended job of this run's trainer can be
// tried again under a new id (Options.RetryEndedJob): the job API's
// trainers, whose ids are idempotency keys.
func (r *run) retriable() bool {
	_, resumable := r.o.opts.Trainer.(ResumableTrainer)
	return !resumable
}

// retry submits the job of step s, found ended failed or cancelled when
// the run resumed (Options.RetryEndedJob), again under the next attempt's
// id, recorded first as the step's in-flight job (the same rollouts, train
// statistics and output adapter), and waits for it.
func (r *run) retry(ctx context.Context, s int, inf checkpoint.InFlight, req trainer.JobRequest, ended error) (*checkpoint.Job, trainer.Adapter, error) {
	req.ID = trainer.RetryID(req.ID)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, trainer.Adapter{}, fmt.Errorf("encode job: %w", err)
	}
	inf.JobID, inf.Request, inf.Submitted, inf.Next = req.ID, body, r.o.now(), nil
	if err := r.o.opts.Store.SetInFlight(ctx, r.name, inf); err != nil {
		return nil, trainer.Adapter{}, err
	}
	r.o.opts.Logger.Warn("the step's trainer job had ended; submitting it again under a new id (--retry-job)",
		"run", r.name, "step", s, "job", req.ID, "ended", ended)
	return r.train(ctx, s, req)
}

// train submits the job (idempotently: after a restart this reattaches to
// the job already there) and waits for it.
func (r *run) train(ctx context.Context, s int, req trainer.JobRequest) (*checkpoint.Job, trainer.Adapter, error) {
	submitted := r.o.now()
	job, err := r.o.opts.Trainer.Submit(ctx, req)
	if err != nil {
		return nil, trainer.Adapter{}, err // it names the job (Trainer)
	}
	r.emit(Event{Type: EventJobState, Step: s, JobState: jobState(job)})
	wait := func() (trainer.Job, error) {
		return r.o.opts.Trainer.Wait(ctx, req.ID, time.Duration(r.cfg.Trainer.JobTimeout), func(j trainer.Job) {
			r.emit(Event{Type: EventJobState, Step: s, JobState: jobState(j)})
		})
	}
	job, err = wait()
	if errors.Is(err, trainer.ErrJobNotFound) {
		// The trainer lost the job (a restart that kept no jobs): the
		// same request again, once, starts it over.
		r.o.opts.Logger.Warn("the trainer no longer knows the job; submitting it again", "run", r.name, "job", req.ID, "err", err)
		if _, err := r.o.opts.Trainer.Submit(ctx, req); err != nil {
			return nil, trainer.Adapter{}, err
		}
		job, err = wait()
		if errors.Is(err, trainer.ErrJobNotFound) {
			err = fmt.Errorf("%w (lost again after it was submitted again: the trainer keeps no jobs, or another one answers at its URL)", err)
		}
	}
	switch {
	case errors.Is(err, trainer.ErrJobFailed):
		return nil, trainer.Adapter{}, fmt.Errorf("%w (%s)", err, r.retryHint("failed"))
	case errors.Is(err, trainer.ErrJobCancelled), errors.Is(err, trainer.ErrJobTimeout):
		// A resume reattaches to the cancelled job and ends here again.
		return nil, trainer.Adapter{}, fmt.Errorf("%w (%s)", err, r.retryHint("cancelled"))
	}
	if err != nil {
		return nil, trainer.Adapter{}, err // it names the job (Trainer)
	}
	if job.Adapter == nil || job.Adapter.Name == "" || job.Adapter.Path == "" {
		return nil, trainer.Adapter{}, fmt.Errorf("trainer job %s succeeded without an adapter {name, path}", req.ID)
	}
	// A job API trainer names the adapter as asked (DESIGN §5): one that
	// names it otherwise could have the run load, and later unload,
	// another run's adapter. (ART names its checkpoints itself.)
	if r.cfg.Trainer.Kind != config.TrainerART && job.Adapter.Name != req.OutputAdapter {
		return nil, trainer.Adapter{}, fmt.Errorf("trainer job %s succeeded with adapter %q, not the output_adapter %q it was asked for: the trainer does not follow the job API (DESIGN §5); the run stops rather than load an adapter it did not name", req.ID, job.Adapter.Name, req.OutputAdapter)
	}
	rec := &checkpoint.Job{ID: job.ID, State: job.State, Submitted: submitted, Finished: r.o.now(), Metrics: map[string]float64{}}
	if m := job.Metrics; m != nil {
		rec.Metrics = m.Map()
		r.checkLogprobGap(s, req, m.SamplerLogprobGap)
	}
	return rec, *job.Adapter, nil
}

// LogprobGapWarning is the trainer's sampler_logprob_gap (nats) above
// which a run warns. The gap is the mean |trainer logprob - sampler
// logprob| over the sampled tokens before the first update, so it says
// how far the importance ratios start from 1: at 0.05 they are about 5%
// off before any learning, a quarter of the default clip range (epsilon
// 0.2), and the clip starts acting on noise rather than on updates.
// Rounding differences between the server's and the trainer's kernels
// should stay below it; a trainer not scoring what the server sampled
// (another chat template or tokenizer, vLLM's raw logprobs instead of
// --logprobs-mode processed_logprobs, a temperature the trainer does not
// apply) moves every token's logprob and exceeds it.
const LogprobGapWarning = 0.05

// checkLogprobGap warns, once per run, when the sampler logprob gap of
// step s's job exceeds LogprobGapWarning; gap is nil when the trainer did
// not report it. A job whose rollouts an older policy sampled than the
// parent adapter it trains (an asynchronous pipeline) is not checked:
// its gap also measures that lag (0.04 to 0.08 nats at a lag of one step
// on the reference backend). A mismatch shows on the on-policy jobs too,
// and step 1's job always is one: the base samples its rollouts and it
// trains from the base.
func (r *run) checkLogprobGap(s int, req trainer.JobRequest, gap *float64) {
	if gap == nil || !(*gap > LogprobGapWarning) {
		return
	}
	for _, t := range req.Trajectories {
		if t.PolicyStep != nil && *t.PolicyStep != s-1 {
			return
		}
	}
	if !r.gapWarned.CompareAndSwap(false, true) {
		return
	}
	r.o.opts.Logger.Warn("the trainer does not score the sampled tokens as the inference server did: check that both use the same chat template and tokenizer, that vLLM runs with --logprobs-mode processed_logprobs, and that the trainer applies the sampling temperature; the importance ratios are off before any update (warned once per run)",
		"run", r.name, "step", s, "job", req.ID, "sampler_logprob_gap", *gap, "threshold", LogprobGapWarning)
}

// load hot-loads the job's adapter into every endpoint and switches
// rollouts to it.
func (r *run) load(ctx context.Context, s int, a trainer.Adapter) error {
	name := r.servedName(a.Name)
	if err := r.o.opts.Adapters.LoadEverywhere(ctx, name, a.Path); err != nil {
		return err // it says "load adapter NAME"
	}
	r.mu.Lock()
	r.adapter = &a
	r.mu.Unlock()
	r.keeper.Track(name)
	r.emit(Event{Type: EventAdapterLoaded, Step: s, AdapterLoaded: &AdapterLoaded{Adapter{Name: a.Name, Path: a.Path}}})
	return nil
}

// pruneAdapters unloads adapters other than the best and the last `keep`.
func (r *run) pruneAdapters(ctx context.Context) error {
	if r.cfg.Inference.Adapters.Naming == "inplace" {
		return nil
	}
	best := ""
	if r.best != nil && r.best.Adapter != nil {
		best = r.servedName(r.best.Adapter.Name)
	}
	sampling := r.pipe.models()
	for _, name := range r.keeper.Prune(best) {
		if r.adapter != nil && name == r.servedName(r.adapter.Name) || slices.Contains(sampling, name) {
			continue
		}
		if err := r.o.opts.Adapters.UnloadEverywhere(ctx, name); err != nil {
			// Not fatal: the adapter only costs server memory.
			r.o.opts.Logger.Warn("unload adapter", "run", r.name, "adapter", name, "err", err)
			continue
		}
		r.keeper.Untrack(name)
	}
	return nil
}

func (r *run) validationDue(s int) bool {
	return s == r.cfg.Run.Steps || s%r.cfg.Validation.Every == 0
}

func (r *run) validationEpisodes() int {
	return len(r.cfg.Validation.N) * r.cfg.Validation.Episodes
}

func (r *run) validationEpisodesAt(s int) int {
	if !r.validationDue(s) {
		return 0
	}
	return r.validationEpisodes()
}

// validated is a step's validation: its evaluation and the episodes, for
// a trainer that logs them.
type validated struct {
	ev       *checkpoint.Evaluation
	episodes []rollout.Episode
	seconds  float64
}

// validate plays the held-out episodes with model and tells a trainer
// that logs validations. Every validation uses the same seeds (disjoint
// from training seeds), so steps are compared on the same tables.
func (r *run) validate(ctx context.Context, s int, model string) (*checkpoint.Evaluation, error) {
	v, err := r.playValidation(ctx, s, model)
	if err != nil {
		return nil, err
	}
	r.logValidation(ctx, s, v.episodes)
	return v.ev, nil
}

// playValidation plays step s's validation episodes with model.
func (r *run) playValidation(ctx context.Context, s int, model string) (validated, error) {
	t0 := time.Now()
	v := r.cfg.Validation
	set := evaluate.Set{
		Model: model, Env: r.env(0, 0), Reward: r.reward(), Sampling: r.sampling(v.Temperature),
		N: v.N, Episodes: v.Episodes, What: "validation", Transcripts: v.Transcripts,
		Seeds: func(n, i int) (int64, int64) {
			seed := r.cfg.ValidationSeed(i)
			return seed, rollout.RequestSeed(seed, n, -2)
		},
		ID: func(n, i int) string { return fmt.Sprintf("v%d-n%d-e%d", s, n, i) },
	}
	res, err := evaluate.Run(ctx, evaluate.Options{
		Client: r.o.opts.Completer, Limit: r.limit(), Concurrency: r.cfg.Inference.Concurrency, OnCall: r.onCall["validation"],
		OnEpisode: func(ep rollout.Episode) { r.episodeFinished(s, "validation", ep) },
		Replays:   r.cfg.Inference.EpisodeReplays, MaxErroredFraction: r.cfg.Inference.MaxErroredFraction,
	}, set)
	if err != nil {
		return validated{}, err
	}
	if res.Stats.Errored > 0 {
		r.o.opts.Logger.Warn("validation episodes errored after replays; the figures leave them out", "run", r.name, "step", s, "errored", res.Stats.Errored, "episodes", len(res.Episodes), "first_error", firstError(res.Episodes))
	}
	ev := res.Evaluation(s)
	r.emit(Event{Type: EventValidationDone, Step: s, ValidationDone: validationDone(ev)})
	return validated{ev: &ev, episodes: res.Episodes, seconds: time.Since(t0).Seconds()}, nil
}

// logValidation sends step s's validation episodes to a trainer that logs
// them (ART); not fatal: the store has the validation.
func (r *run) logValidation(ctx context.Context, s int, eps []rollout.Episode) {
	if l, ok := r.o.opts.Trainer.(ValidationLogger); ok {
		if err := l.LogValidation(ctx, s, validationTrajectories(s, eps)); err != nil {
			r.o.opts.Logger.Warn("log validation with the trainer", "run", r.name, "step", s, "err", err)
		}
	}
}

// validationTrajectories are the scored validation episodes as trainer
// trajectories for a ValidationLogger: one group per table size, each
// philosopher's conversation with the episode's reward and advantage 0.
func validationTrajectories(s int, eps []rollout.Episode) []trainer.Trajectory {
	var out []grpo.Trajectory
	tools := rollout.ToolsJSON()
	for _, ep := range eps {
		if ep.Errored {
			continue
		}
		for _, tr := range ep.Transcripts {
			out = append(out, grpo.Trajectory{
				MessagesAndChoices: tr.MessagesAndChoices, Tools: tools, Reward: ep.Reward,
				Group: fmt.Sprintf("v%d-n%d", s, ep.Spec.Env.N), Episode: ep.Spec.ID, Agent: tr.Agent,
				Sampling: grpo.SamplingOf(ep.Spec),
			})
		}
	}
	return trainer.Trajectories(out)
}

// firstError is the error of the first errored episode of eps.
func firstError(eps []rollout.Episode) string {
	for _, ep := range eps {
		if ep.Errored {
			return ep.Error
		}
	}
	return ""
}
