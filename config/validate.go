package config

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

// MaxLoRARank is the largest LoRA rank accepted (vLLM's --max-lora-rank
// must be at least the rank trained).
const MaxLoRARank = 64

var envVarName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports the first bad value as an *Error naming its key and what
// is accepted.
func (c Config) Validate() error {
	for _, check := range []func() error{
		c.validateRun, c.validateEnv, c.validateReward, c.validateGRPO,
		c.validateInference, c.validateTrainer,
		// The curriculum before validation: validation.n defaults to
		// its sizes, so a bad size is reported where it was written.
		c.validateCurriculum, c.validateValidation, c.validateSeeds, c.validateSize,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateSize checks c against MachineLimits.
func (c Config) validateSize() error {
	return MachineLimits.check(c, func(string) string {
		return " (grpo's bound on any run: beyond it a step's episodes or a table's agents do not fit in memory)"
	})
}

func (c Config) validateRun() error {
	r := c.Run
	switch {
	case r.Steps < 1:
		return invalid("run.steps", "is %d; need at least 1 step", r.Steps)
	case r.Name != "" && checkpoint.ValidateRunName(r.Name) != nil:
		return invalid("run.name", "%q is not accepted; use %s (it becomes part of adapter names and job ids), or leave it empty to generate one", r.Name, checkpoint.RunNameRule)
	}
	return nil
}

func (c Config) validateEnv() error {
	e := c.Env
	switch {
	case e.N < 2:
		return invalid("env.n", "is %d; need at least 2 philosophers", e.N)
	case e.Rounds < 1:
		return invalid("env.rounds", "is %d; need at least 1 round", e.Rounds)
	case !accepted(e.Mode, rollout.Modes):
		return invalid("env.mode", "%q is not accepted; accepted: %s", e.Mode, joinNames(rollout.Modes))
	case e.DeadlockPatience < 1:
		return invalid("env.deadlock_patience", "is %d; need at least 1 round", e.DeadlockPatience)
	}
	// Anything rollout adds later is still refused.
	if err := c.EnvConfig().Validate(); err != nil {
		return invalid("env", "%v", err)
	}
	return nil
}

// EnvConfig is the training table for env, with the table size of env.n.
func (c Config) EnvConfig() rollout.EnvConfig {
	return rollout.EnvConfig{N: c.Env.N, Rounds: c.Env.Rounds, Mode: c.Env.Mode, DeadlockPatience: c.Env.DeadlockPatience}
}

func (c Config) validateReward() error {
	r := c.Reward
	if _, err := rollout.ParseRewardFunc(string(r.Function)); err != nil {
		return invalid("reward.function", "%q is not accepted; accepted: %s", r.Function, joinNames(rollout.RewardFuncs))
	}
	for _, w := range []struct {
		key string
		v   float64
	}{
		{"reward.weights.alpha", r.Weights.Alpha},
		{"reward.weights.beta", r.Weights.Beta},
		{"reward.weights.gamma", r.Weights.Gamma},
		{"reward.weights.delta", r.Weights.Delta},
	} {
		if !finite(w.v) {
			return invalid(w.key, "is %v; need a finite number", w.v)
		}
	}
	return nil
}

func (c Config) validateGRPO() error {
	g := c.GRPO
	switch {
	case g.Groups < 1:
		return invalid("grpo.groups", "is %d; need at least 1 group", g.Groups)
	case g.EpisodesPerGroup < 2:
		return invalid("grpo.episodes_per_group", "is %d; need at least 2: a group of one episode has no reward variance, so no advantage", g.EpisodesPerGroup)
	case g.MaxResamples < 0:
		return invalid("grpo.max_resamples", "is %d; need 0 or more", g.MaxResamples)
	case g.MaxOffPolicySteps < 0:
		return invalid("grpo.max_off_policy_steps", "is %d; need 0 (synchronous) or more (rollouts may use an adapter that many steps old)", g.MaxOffPolicySteps)
	case g.MaxOffPolicySteps > 0 && c.Trainer.Kind == TrainerART:
		return invalid("grpo.max_off_policy_steps", "is %d with trainer.kind art; ART keeps only its best and latest checkpoints, so rollouts cannot sample with older ones: use 0, or trainer.kind jobs or embedded", g.MaxOffPolicySteps)
	case g.MaxOffPolicySteps > 0 && c.Inference.Adapters.Naming == "inplace":
		return invalid("grpo.max_off_policy_steps", "is %d with inference.adapters.naming inplace; an asynchronous pipeline samples with older adapters while newer ones load, so it needs naming per-step", g.MaxOffPolicySteps)
	}
	if _, err := grpo.ParseStd(string(g.Advantage.Std)); err != nil {
		return invalid("grpo.advantage.std", "%v", err)
	}
	if _, err := grpo.ParseBaseline(string(g.Advantage.Baseline)); err != nil {
		return invalid("grpo.advantage.baseline", "%v", err)
	}
	if err := g.Advantage.Validate(); err != nil {
		return invalid("grpo.advantage", "%v", err)
	}
	return nil
}

// MaxEndpoints is the most inference.endpoints a run may list: a run
// probes them all at once at start and keeps metric series per endpoint.
const MaxEndpoints = 256

func (c Config) validateInference() error {
	in := c.Inference
	if n := len(in.Endpoints); n > MaxEndpoints {
		return invalid("inference.endpoints", "lists %d endpoints; at most %d", n, MaxEndpoints)
	}
	for i, e := range in.Endpoints {
		if e.Peer != "" && e.URL == "" {
			return invalid(fmt.Sprintf("inference.endpoints[%d].peer", i), "%q names a peer of a daemon (grpo serve --peers); outside the daemon give the endpoint's url", e.Peer)
		}
		if err := httpURL(e.URL); err != nil {
			return invalid(fmt.Sprintf("inference.endpoints[%d].url", i), "%v", err)
		}
		if e.APIKeyEnv != "" && e.APIKeyEnv != NoAPIKey && !envVarName.MatchString(e.APIKeyEnv) {
			return invalid(fmt.Sprintf("inference.endpoints[%d].api_key_env", i), "%q is not an environment variable name (letters, digits, _; not starting with a digit)", e.APIKeyEnv)
		}
	}
	for _, b := range []struct {
		key   string
		v     int
		bound Bound[int]
	}{
		{"inference.max_tokens", in.MaxTokens, MaxTokensBound},
		{"inference.concurrency", in.Concurrency, ConcurrencyBound},
		{"inference.retries", in.Retries, RetriesBound},
		{"inference.episode_replays", in.EpisodeReplays, EpisodeReplaysBound},
		{"inference.adapters.keep", in.Adapters.Keep, AdaptersKeepBound},
	} {
		if msg := b.bound.Check(b.v); msg != "" {
			return invalid(b.key, "is %d; %s", b.v, msg)
		}
	}
	for _, b := range []struct {
		key   string
		v     Duration
		bound Bound[time.Duration]
	}{
		{"inference.request_timeout", in.RequestTimeout, RequestTimeoutBound},
		{"inference.retry_budget", in.RetryBudget, RetryBudgetBound},
		{"inference.outage_window", in.OutageWindow, OutageWindowBound},
	} {
		if msg := b.bound.Check(time.Duration(b.v)); msg != "" {
			return invalid(b.key, "is %v; %s", b.v, msg)
		}
	}
	switch {
	case in.Model == "":
		return invalid("inference.model", "is empty; give the base model's served name")
	case !nonNegative(in.Temperature):
		return invalid("inference.temperature", "is %v; need a number >= 0", in.Temperature)
	case !finite(in.MaxErroredFraction) || in.MaxErroredFraction < 0 || in.MaxErroredFraction > 1:
		return invalid("inference.max_errored_fraction", "is %v; need a fraction from 0 to 1", in.MaxErroredFraction)
	case in.Adapters.Naming != NamingPerStep && in.Adapters.Naming != NamingInplace:
		return invalid("inference.adapters.naming", "%q is not accepted; accepted: %s, %s", in.Adapters.Naming, NamingPerStep, NamingInplace)
	case in.Adapters.Inplace != InplaceAuto && in.Adapters.Inplace != InplaceLoad && in.Adapters.Inplace != InplaceReload:
		return invalid("inference.adapters.inplace", "%q is not accepted; accepted: %s, %s, %s", in.Adapters.Inplace, InplaceAuto, InplaceLoad, InplaceReload)
	}
	if d := nesting(in.ChatTemplateKwargs); d > maxKwargsDepth {
		return invalid("inference.chat_template_kwargs", "nests %d levels deep; at most %d (it is sent with every request)", d, maxKwargsDepth)
	}
	if b, err := json.Marshal(in.ChatTemplateKwargs); err != nil {
		return invalid("inference.chat_template_kwargs", "cannot be sent as JSON: %v", err)
	} else if len(b) > maxKwargsBytes {
		return invalid("inference.chat_template_kwargs", "is %d bytes as JSON; at most %d (it is sent with every request)", len(b), maxKwargsBytes)
	}
	return nil
}

func (c Config) validateTrainer() error {
	t := c.Trainer
	switch t.Kind {
	case TrainerEmbedded:
		if len(c.Inference.Endpoints) > 0 {
			return invalid("inference.endpoints", "set, but trainer.kind is embedded: the embedded trainer's adapters load only into the embedded inference server; remove the endpoints, or use trainer.kind: jobs")
		}
	case TrainerJobs:
		if t.Peer != "" && t.URL == "" {
			return invalid("trainer.peer", "%q names a peer of a daemon (grpo serve --peers); outside the daemon give trainer.url", t.Peer)
		}
		if len(c.Inference.Endpoints) == 0 {
			return invalid("inference.endpoints", "empty, but trainer.kind jobs needs inference servers that can load its adapters")
		}
		if err := httpURL(t.URL); err != nil {
			return invalid("trainer.url", "%v; trainer.kind jobs needs the job API's address", err)
		}
		if t.APIKeyEnv != "" && !envVarName.MatchString(t.APIKeyEnv) {
			return invalid("trainer.api_key_env", "%q is not an environment variable name (letters, digits, _; not starting with a digit)", t.APIKeyEnv)
		}
	case TrainerART:
		if err := c.validateART(); err != nil {
			return err
		}
	default:
		return invalid("trainer.kind", "%q is not accepted; accepted: %s, %s, %s", t.Kind, TrainerEmbedded, TrainerJobs, TrainerART)
	}
	if t.APIKeyEnv != "" && t.Kind != TrainerJobs {
		return invalid("trainer.api_key_env", "is set, but trainer.kind is %s: only the job API (trainer.kind jobs) is sent a key", t.Kind)
	}
	if msg := JobTimeoutBound.Check(time.Duration(t.JobTimeout)); msg != "" {
		return invalid("trainer.job_timeout", "is %v; %s", t.JobTimeout, msg)
	}
	h := t.Hyperparameters
	switch {
	case t.BaseModel == "":
		return invalid("trainer.base_model", "is empty; give the base model the trainer loads")
	case t.LoRA.Rank < 1 || t.LoRA.Rank > MaxLoRARank:
		return invalid("trainer.lora.rank", "is %d; accepted: 1 to %d", t.LoRA.Rank, MaxLoRARank)
	case !positive(t.LoRA.Alpha):
		return invalid("trainer.lora.alpha", "is %v; need a number > 0", t.LoRA.Alpha)
	case !positive(h.LearningRate):
		return invalid("trainer.hyperparameters.learning_rate", "is %v; need a number > 0", h.LearningRate)
	case !positive(h.Epsilon) || h.Epsilon >= 1:
		return invalid("trainer.hyperparameters.epsilon", "is %v; accepted: 0 < epsilon < 1 (the ratio's lower clip is 1 - epsilon; the reference trainer refuses more)", h.Epsilon)
	case !nonNegative(h.EpsilonHigh):
		return invalid("trainer.hyperparameters.epsilon_high", "is %v; need a number >= 0 (0: same as epsilon)", h.EpsilonHigh)
	case !nonNegative(h.KLBeta):
		return invalid("trainer.hyperparameters.kl_beta", "is %v; need a number >= 0", h.KLBeta)
	case h.Epochs < 1 || h.Epochs > 1000:
		return invalid("trainer.hyperparameters.epochs", "is %d; accepted: 1 to 1000 (the reference trainers refuse more)", h.Epochs)
	case h.MiniBatches < 1 || h.MiniBatches > MaxMiniBatches:
		return invalid("trainer.hyperparameters.mini_batches", "is %d; accepted: 1 to %d (optimizer steps per epoch over a step's trajectories; 1: one step on them all)", h.MiniBatches, MaxMiniBatches)
	case h.WarmupSteps < 0 || h.WarmupSteps > MaxWarmupSteps:
		return invalid("trainer.hyperparameters.warmup_steps", "is %d; accepted: 0 (no warm-up) to %d optimizer steps", h.WarmupSteps, MaxWarmupSteps)
	case !(t.BaseCoordination >= MinBaseCoordination && t.BaseCoordination <= MaxBaseCoordination):
		return invalid("trainer.base_coordination", "is %v; accepted: %v to %v (0: the default base; below 0 coordinates worse, above 0 better)", t.BaseCoordination, MinBaseCoordination, MaxBaseCoordination)
	case t.BaseCoordination != 0 && !c.Embedded():
		return invalid("trainer.base_coordination", "is %v, but the run does not use the embedded backend (trainer.kind %s): only the embedded reference policy has this knob; remove it", t.BaseCoordination, t.Kind)
	}
	if err := optimizerKeys(t); err != nil {
		return err
	}
	for i, m := range t.LoRA.TargetModules {
		if m == "" {
			return invalid(fmt.Sprintf("trainer.lora.target_modules[%d]", i), "is empty; give a module name such as q_proj")
		}
	}
	return nil
}

// Bounds of the optimizer's hyperparameters. MaxMiniBatches is epochs'
// bound: each mini-batch is an optimizer step over a share of one step's
// trajectories, and a thousand of them is already more steps than a GRPO
// batch has trajectories at the default sizes (30: 2 groups × 3 episodes
// × 5 philosophers). A warm-up of a million optimizer steps does not end
// within any run one would train.
const (
	MaxMiniBatches = 1000
	MaxWarmupSteps = 1_000_000
)

// optimizerKeys refuses the optimizer's hyperparameters (DESIGN §5,
// "Optimizer state and diagnostics") away from their defaults for the
// trainers that would ignore them: only the job API carries them.
func optimizerKeys(t Trainer) error {
	if t.Kind == TrainerJobs {
		return nil
	}
	why := "the embedded trainer takes full-batch gradient steps and keeps no optimizer state"
	if t.Kind == TrainerART {
		why = "grpo does not send it to ART, which keeps its own optimizer"
	}
	h := t.Hyperparameters
	switch {
	case h.MiniBatches != 1:
		return invalid("trainer.hyperparameters.mini_batches", "is %d; trainer.kind %s accepts only 1 (%s); the job API's trainers (trainer.kind jobs) take more", h.MiniBatches, t.Kind, why)
	case h.WarmupSteps != 0:
		return invalid("trainer.hyperparameters.warmup_steps", "is %d; trainer.kind %s accepts only 0 (%s); the job API's trainers (trainer.kind jobs) take a warm-up", h.WarmupSteps, t.Kind, why)
	case h.ResetOptimizer:
		return invalid("trainer.hyperparameters.reset_optimizer", "is true; trainer.kind %s accepts only false (%s); the job API's trainers (trainer.kind jobs) take it", t.Kind, why)
	}
	return nil
}

// validateART checks what trainer.kind art needs besides the trainer's
// common keys. The advantage settings depend on the ART server's version
// and are checked against it when the run starts.
func (c Config) validateART() error {
	t := c.Trainer
	switch {
	case httpURL(t.URL) != nil:
		return invalid("trainer.url", "%v; trainer.kind art needs the address of ART's backend server (`art run`, port 7999 by default)", httpURL(t.URL))
	case len(c.Inference.Endpoints) > 0:
		return invalid("inference.endpoints", "set, but trainer.kind art samples only from the vLLM server ART starts and loads its checkpoints into (the address ART answers to /_prepare_backend_for_training); remove the endpoints")
	case c.Inference.Adapters.Naming != NamingPerStep:
		return invalid("inference.adapters.naming", "%q is not accepted with trainer.kind art: ART names the adapters it serves itself; accepted: %s", c.Inference.Adapters.Naming, NamingPerStep)
	case t.Hyperparameters.Epochs != 1:
		return invalid("trainer.hyperparameters.epochs", "is %d; trainer.kind art accepts only 1 (ART makes one pass over a step's trajectories)", t.Hyperparameters.Epochs)
	case t.LoRA.Alpha != math.Trunc(t.LoRA.Alpha) || t.LoRA.Alpha > math.MaxInt32:
		return invalid("trainer.lora.alpha", "is %v; trainer.kind art needs a whole number (ART's peft_args.lora_alpha is an integer)", t.LoRA.Alpha)
	}
	return nil
}

func (c Config) validateValidation() error {
	v := c.Validation
	switch {
	case v.Every < 1:
		return invalid("validation.every", "is %d; need at least 1 (validate every that many steps)", v.Every)
	case len(v.N) == 0:
		return invalid("validation.n", "is empty; give at least one table size, such as [5]")
	}
	if err := tableSizes("validation.n", v.N); err != nil {
		return err
	}
	switch {
	case v.Episodes < 2:
		return invalid("validation.episodes", "is %d; need at least 2", v.Episodes)
	case !nonNegative(v.Temperature):
		return invalid("validation.temperature", "is %v; need a number >= 0", v.Temperature)
	case !accepted(v.Metric, checkpoint.MetricNames):
		return invalid("validation.metric", "%q is not accepted; accepted: %s", v.Metric, joinNames(checkpoint.MetricNames))
	case !accepted(v.Selection, checkpoint.Policies):
		return invalid("validation.selection", "%q is not accepted; accepted: %s", v.Selection, joinNames(checkpoint.Policies))
	case !(v.EMA >= 0 && v.EMA < 1):
		return invalid("validation.ema", "is %v; accepted: 0 <= ema < 1 (0: no smoothing)", v.EMA)
	case v.Transcripts < 0 || v.Transcripts > v.Episodes:
		return invalid("validation.transcripts", "is %d; accepted: 0 to validation.episodes (%d)", v.Transcripts, v.Episodes)
	}
	return nil
}

func (c Config) validateCurriculum() error {
	cu := c.Curriculum
	if _, err := ParseSchedule(cu.Schedule); err != nil {
		return invalid("curriculum.schedule", "%v", err)
	}
	p := cu.Promote
	switch {
	case cu.Schedule != "" && (len(p.Sizes) > 0 || p.Threshold != 0):
		return invalid("curriculum.promote", "set together with curriculum.schedule; use one of them")
	case len(p.Sizes) == 0 && p.Threshold != 0:
		return invalid("curriculum.promote.sizes", "is empty, but curriculum.promote.threshold is set; list the table sizes to promote through, such as [5, 10, 15]")
	case len(p.Sizes) > 0 && (p.Threshold == 0 || !finite(p.Threshold)):
		return invalid("curriculum.promote.threshold", "is %v; set the finite, non-zero value of %s that promotes to the next size", p.Threshold, c.Validation.Metric)
	}
	return tableSizes("curriculum.promote.sizes", p.Sizes)
}

// tableSizes checks a list of table sizes: each at least 2, none twice (a
// repeated size would play its tables twice and count each as two
// episodes, narrowing the confidence intervals it reports).
func tableSizes(key string, ns []int) error {
	for i, n := range ns {
		if n < 2 {
			return invalid(keyIndex(key, i), "is %d; need at least 2 philosophers", n)
		}
		if j := slices.Index(ns[:i], n); j >= 0 {
			return invalid(keyIndex(key, i), "is %d, as %s is; list each table size once", n, keyIndex(key, j))
		}
	}
	return nil
}

// validateSeeds checks the test section and keeps the validation and test
// tables apart. Training seeds need no check: TrainSeed never draws a
// reserved one.
func (c Config) validateSeeds() error {
	t := c.Test
	if err := tableSizes("test.n", t.N); err != nil {
		return err
	}
	if t.Episodes < 2 {
		return invalid("test.episodes", "is %d; need at least 2", t.Episodes)
	}
	v := c.Validation
	// [v.Seed, v.Seed+v.Episodes) and [t.Seed, t.Seed+t.Episodes) must be
	// disjoint; big.Int so seeds near the ends of int64 cannot wrap.
	vEnd := new(big.Int).Add(big.NewInt(v.Seed), big.NewInt(int64(v.Episodes)))
	tEnd := new(big.Int).Add(big.NewInt(t.Seed), big.NewInt(int64(t.Episodes)))
	if big.NewInt(v.Seed).Cmp(tEnd) < 0 && big.NewInt(t.Seed).Cmp(vEnd) < 0 {
		return invalid("test.seed", "is %d, so test tables %d..%v overlap validation tables %d..%v (validation.seed, validation.episodes); move one of the seeds",
			t.Seed, t.Seed, new(big.Int).Sub(tEnd, big.NewInt(1)), v.Seed, new(big.Int).Sub(vEnd, big.NewInt(1)))
	}
	return nil
}

// accepted reports whether v is one of the names a domain package accepts.
func accepted[T ~string](v T, names []T) bool { return slices.Contains(names, v) }

// joinNames lists accepted names for an error message.
func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// Bounds of inference.chat_template_kwargs, which every request carries
// (a posted 18 KB value nested 9,000 deep took a daemon's run to 885 MB).
const (
	maxKwargsDepth = 32
	maxKwargsBytes = 16 << 10
)

// nesting is how deeply v's maps and lists nest (0 for a scalar).
func nesting(v any) int {
	deepest := 0
	switch v := v.(type) {
	case map[string]any:
		for _, x := range v {
			deepest = max(deepest, nesting(x))
		}
	case []any:
		for _, x := range v {
			deepest = max(deepest, nesting(x))
		}
	default:
		return 0
	}
	return deepest + 1
}

// httpURL checks that s is an absolute http or https URL that request
// paths can be appended to: no query or fragment (a posted
// "http://host/secret?" made the daemon fetch /secret and quote its
// answer), and no credentials, which the URL would carry into the store,
// the daemon's answers and metric labels (api_key_env sends a key as a
// bearer token without showing it).
func httpURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%q is not an http(s) URL such as http://127.0.0.1:8000/v1", s)
	case u.User != nil:
		return fmt.Errorf("%s carries credentials (user:password@): give the key in api_key_env instead", u.Redacted())
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#"):
		return fmt.Errorf("%q has a query or a fragment: give the server's base URL, such as http://127.0.0.1:8000/v1", s)
	}
	return nil
}

func finite(x float64) bool      { return !math.IsNaN(x) && !math.IsInf(x, 0) }
func positive(x float64) bool    { return finite(x) && x > 0 }
func nonNegative(x float64) bool { return finite(x) && x >= 0 }
