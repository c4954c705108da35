// Package config is the run configuration: one YAML file (DESIGN §10) in
// which every field has a default, so an empty file is a valid run.
package config

import (
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

// Config is a whole run. YAML keys are a public interface: other tools
// write these files. Add keys freely; never rename these.
type Config struct {
	Run        Run        `yaml:"run" json:"run"`
	Env        Env        `yaml:"env" json:"env"`
	Reward     Reward     `yaml:"reward" json:"reward"`
	GRPO       GRPO       `yaml:"grpo" json:"grpo"`
	Inference  Inference  `yaml:"inference" json:"inference"`
	Trainer    Trainer    `yaml:"trainer" json:"trainer"`
	Validation Validation `yaml:"validation" json:"validation"`
	Curriculum Curriculum `yaml:"curriculum" json:"curriculum"`
	Test       Test       `yaml:"test" json:"test"`
}

// Run names the run and its store.
type Run struct {
	Name  string `yaml:"name" json:"name"` // default: generated, unique in the store
	Steps int    `yaml:"steps" json:"steps"`
	Seed  int64  `yaml:"seed" json:"seed"`
	DB    string `yaml:"db" json:"db"`
}

// Env is the table of training rollouts (n may be changed per step by the
// curriculum).
type Env struct {
	N                int          `yaml:"n" json:"n"`
	Rounds           int          `yaml:"rounds" json:"rounds"`
	Mode             rollout.Mode `yaml:"mode" json:"mode"`
	DeadlockPatience int          `yaml:"deadlock_patience" json:"deadlock_patience"`
}

// Reward selects the reward function.
type Reward struct {
	Function rollout.RewardFunc `yaml:"function" json:"function"`
	Weights  rollout.Weights    `yaml:"weights" json:"weights"`
}

// GRPO is the sampling and advantage recipe.
type GRPO struct {
	Groups               int                   `yaml:"groups" json:"groups"`
	EpisodesPerGroup     int                   `yaml:"episodes_per_group" json:"episodes_per_group"`
	Advantage            grpo.AdvantageOptions `yaml:"advantage" json:"advantage"`
	ResampleZeroVariance bool                  `yaml:"resample_zero_variance" json:"resample_zero_variance"`
	MaxResamples         int                   `yaml:"max_resamples" json:"max_resamples"` // replacement groups per step at most
	// MaxOffPolicySteps is k of the asynchronous pipeline: rollouts for a
	// step may be sampled with an adapter up to k steps older than the one
	// the step trains from, so they run while earlier steps train. 0 is
	// synchronous.
	MaxOffPolicySteps int `yaml:"max_off_policy_steps" json:"max_off_policy_steps"`
}

// Endpoint is one OpenAI-compatible inference server.
type Endpoint struct {
	URL       string `yaml:"url" json:"url"`
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env,omitempty"` // NoAPIKey: send no key
	// Peer names an endpoint the daemon's operator declared (grpo serve
	// --peers); the daemon replaces it with that peer's url and
	// api_key_env before the run is stored. The CLI does not read it.
	Peer string `yaml:"peer" json:"peer,omitempty"`
}

// NoAPIKey as an endpoint's api_key_env sends no API key at all (not even
// $OPENAI_API_KEY). The daemon sets it on URLs a posted config names itself.
const NoAPIKey = "-"

// Adapters says how trained adapters are named and how many stay loaded.
type Adapters struct {
	Naming string `yaml:"naming" json:"naming"` // per-step | inplace
	Keep   int    `yaml:"keep" json:"keep"`
	// Inplace is how an inplace name gets new weights: auto | load_inplace | reload.
	Inplace string `yaml:"inplace" json:"inplace"`
}

// Inference is where rollouts are sampled.
type Inference struct {
	Endpoints          []Endpoint     `yaml:"endpoints" json:"endpoints"` // empty: the embedded reference backend (with trainer.kind art: must be empty, ART's vLLM is used)
	Model              string         `yaml:"model" json:"model"`
	Temperature        float64        `yaml:"temperature" json:"temperature"`
	MaxTokens          int            `yaml:"max_tokens" json:"max_tokens"`
	ChatTemplateKwargs map[string]any `yaml:"chat_template_kwargs" json:"chat_template_kwargs,omitempty"`
	Concurrency        int            `yaml:"concurrency" json:"concurrency"`
	RequestTimeout     Duration       `yaml:"request_timeout" json:"request_timeout"`
	Retries            int            `yaml:"retries" json:"retries"`
	// RetryBudget bounds the time one request spends on all its attempts
	// and waits (default 2m): a client gives up at the first of retries
	// and retry_budget, and a request that failed at the only live
	// endpoint is sent there again, after a backoff, until retry_budget
	// since its first failure has passed (0: the endpoint is drained at
	// once and the count alone bounds a request).
	RetryBudget Duration `yaml:"retry_budget" json:"retry_budget"`
	// EpisodeReplays is how many times an episode whose call still fails
	// after the retries is replayed from its seeds (exactly the same
	// episode) before it counts as errored.
	EpisodeReplays int `yaml:"episode_replays" json:"episode_replays"`
	// MaxErroredFraction fails a training step or a validation when more
	// than this fraction of its episodes errored even after replays.
	MaxErroredFraction float64  `yaml:"max_errored_fraction" json:"max_errored_fraction"`
	Adapters           Adapters `yaml:"adapters" json:"adapters"`
	// OutageWindow is how long requests wait for an endpoint when none is live (0: fail at once).
	OutageWindow Duration `yaml:"outage_window" json:"outage_window"`
}

// LoRA is the adapter shape asked of the trainer.
type LoRA struct {
	Rank          int      `yaml:"rank" json:"rank"`
	Alpha         float64  `yaml:"alpha" json:"alpha"`
	TargetModules []string `yaml:"target_modules" json:"target_modules"`
}

// Hyperparameters of each update.
type Hyperparameters struct {
	LearningRate float64 `yaml:"learning_rate" json:"learning_rate"`
	Epsilon      float64 `yaml:"epsilon" json:"epsilon"`
	EpsilonHigh  float64 `yaml:"epsilon_high" json:"epsilon_high"`
	KLBeta       float64 `yaml:"kl_beta" json:"kl_beta"`
	Epochs       int     `yaml:"epochs" json:"epochs"`
	// MiniBatches is how many optimizer steps a trainer takes per epoch
	// over a job's sequences (DESIGN §5).
	MiniBatches int `yaml:"mini_batches" json:"mini_batches"`
	// WarmupSteps is the linear warm-up, in optimizer steps counted along
	// the adapter's lineage.
	WarmupSteps int `yaml:"warmup_steps" json:"warmup_steps"`
	// ResetOptimizer has the trainer start each job's optimizer state
	// fresh instead of restoring the parent adapter's.
	ResetOptimizer bool `yaml:"reset_optimizer" json:"reset_optimizer"`
}

// Trainer is where updates are computed.
type Trainer struct {
	Kind string `yaml:"kind" json:"kind"` // embedded | jobs | art
	URL  string `yaml:"url" json:"url"`
	// Peer names a trainer the daemon's operator declared (grpo serve
	// --peers); the daemon replaces it with that peer's kind and url.
	Peer string `yaml:"peer" json:"peer,omitempty"`
	// APIKeyEnv names the environment variable whose value is sent to the
	// job API as "Authorization: Bearer ..." (trainer.kind jobs); "": no
	// key. The value is never logged nor stored.
	APIKeyEnv       string          `yaml:"api_key_env" json:"api_key_env,omitempty"`
	BaseModel       string          `yaml:"base_model" json:"base_model"`
	LoRA            LoRA            `yaml:"lora" json:"lora"`
	Hyperparameters Hyperparameters `yaml:"hyperparameters" json:"hyperparameters"`
	JobTimeout      Duration        `yaml:"job_timeout" json:"job_timeout"`
	// BaseCoordination is the embedded backend's base strength: how well
	// its base policy coordinates, MinBaseCoordination to
	// MaxBaseCoordination, 0 the default base. Left out of the JSON at 0,
	// so configs written before the key existed compare equal.
	BaseCoordination float64 `yaml:"base_coordination" json:"base_coordination,omitempty"`
}

// The accepted trainer.base_coordination (the reference backend's
// refmodel.MinBaseCoordination and MaxBaseCoordination).
const (
	MinBaseCoordination = -1.0
	MaxBaseCoordination = 1.0
)

// Validation is the held-out evaluation that selects the best step.
type Validation struct {
	Every       int               `yaml:"every" json:"every"`
	N           []int             `yaml:"n" json:"n"`
	Episodes    int               `yaml:"episodes" json:"episodes"`
	Seed        int64             `yaml:"seed" json:"seed"` // validation tables are seeds seed, seed+1, ...; training seeds avoid them
	Temperature float64           `yaml:"temperature" json:"temperature"`
	Metric      checkpoint.Metric `yaml:"metric" json:"metric"`
	Selection   checkpoint.Policy `yaml:"selection" json:"selection"` // best-validation | best-train | last
	EMA         float64           `yaml:"ema" json:"ema"`
	// Transcripts is how many validation episodes per table size (the
	// first ones) the store keeps round by round for the dashboard.
	Transcripts int `yaml:"transcripts" json:"transcripts"`
}

// Test is the held-out split that measures a chosen checkpoint on tables
// never used for training or selection (DESIGN §11). It is set when N is
// not empty, as Parse makes it for a document with a test section (N
// defaults to the sizes the run trains at: Config.TestSizes); the
// end-of-run summary reports the chosen step on a test split that is
// set. `grpo eval --run` uses it, set or not (its flags override it).
type Test struct {
	N        []int `yaml:"n" json:"n"`
	Episodes int   `yaml:"episodes" json:"episodes"`
	Seed     int64 `yaml:"seed" json:"seed"` // test tables are seeds seed, seed+1, ...; training seeds avoid them
}

// Set reports whether the config asks for a test split.
func (t Test) Set() bool { return len(t.N) > 0 }

// Curriculum changes the training table size over steps.
type Curriculum struct {
	Schedule string `yaml:"schedule" json:"schedule"` // e.g. "5@0,10@6,15@11"
	// Promotion, when set, moves to the next size in Sizes once the
	// validation metric reaches Threshold.
	Promote PromoteRule `yaml:"promote" json:"promote"`
}

// PromoteRule is threshold-based curriculum promotion.
type PromoteRule struct {
	Sizes     []int   `yaml:"sizes" json:"sizes,omitempty"`
	Threshold float64 `yaml:"threshold" json:"threshold,omitempty"`
}

// Duration is a time.Duration written as "60s", "30m" in YAML and JSON.
type Duration time.Duration
