package config

import (
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

// Trainer kinds.
const (
	TrainerEmbedded = "embedded"
	TrainerJobs     = "jobs"
	TrainerART      = "art"
)

// Adapter naming schemes.
const (
	NamingPerStep = "per-step"
	NamingInplace = "inplace"

	// How an inplace adapter name gets new weights (inference.adapters.inplace).
	InplaceAuto   = "auto"
	InplaceLoad   = "load_inplace"
	InplaceReload = "reload"
)

// DefaultModel is the base model of the study, served under its Hugging
// Face name.
const DefaultModel = "Qwen/Qwen3-14B"

// DefaultTargetModules are the LoRA targets of the study: every attention
// and MLP projection.
var DefaultTargetModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// Default returns the defaults of DESIGN §10. It does not apply the
// embedded-backend defaults that Parse applies with WithEmbedded, so it is the
// value a file sets keys over.
func Default() Config {
	env, reward := rollout.DefaultEnvConfig(), rollout.DefaultRewardConfig()
	return Config{
		Run:    Run{Steps: 16, Seed: 1, DB: "grpo.db"},
		Env:    Env{N: env.N, Rounds: env.Rounds, Mode: env.Mode, DeadlockPatience: env.DeadlockPatience},
		Reward: Reward{Function: reward.Function, Weights: reward.Weights},
		GRPO: GRPO{
			Groups:           2,
			EpisodesPerGroup: 3,
			Advantage:        grpo.DefaultAdvantageOptions(),
			MaxResamples:     4,
		},
		Inference: Inference{
			Endpoints:          []Endpoint{},
			Model:              DefaultModel,
			Temperature:        1.0,
			MaxTokens:          512,
			ChatTemplateKwargs: map[string]any{"enable_thinking": false},
			Concurrency:        64,
			RequestTimeout:     Duration(60 * time.Second),
			Retries:            3,
			RetryBudget:        Duration(2 * time.Minute),
			EpisodeReplays:     2,
			MaxErroredFraction: 0.1,
			Adapters:           Adapters{Naming: NamingPerStep, Keep: 2, Inplace: InplaceAuto},
			OutageWindow:       Duration(2 * time.Minute),
		},
		Trainer: Trainer{
			Kind:      TrainerEmbedded,
			URL:       "http://127.0.0.1:7000",
			BaseModel: DefaultModel,
			LoRA: LoRA{
				Rank:          8,
				Alpha:         16,
				TargetModules: append([]string(nil), DefaultTargetModules...),
			},
			Hyperparameters: Hyperparameters{LearningRate: 5.0e-6, Epsilon: 0.2, EpsilonHigh: 0.2, KLBeta: 0.0, Epochs: 1, MiniBatches: 1},
			JobTimeout:      Duration(30 * time.Minute),
		},
		Validation: Validation{
			Every:       1,
			N:           []int{5},
			Episodes:    24,
			Transcripts: 1,
			Seed:        1000000,
			Temperature: 1.0,
			Metric:      checkpoint.MetricRewardMean,
			Selection:   checkpoint.PolicyBestValidation,
		},
		Test: Test{Episodes: 100, Seed: 2000000},
	}
}

// Embedded reports whether the run uses the in-process reference backend
// for both inference and training.
func (c Config) Embedded() bool {
	return c.Trainer.Kind == TrainerEmbedded && len(c.Inference.Endpoints) == 0
}

// EmbeddedDefaults are the values a run on the embedded reference backend
// uses for the keys its document leaves unset: the study's Qwen names and
// 5e-6 learning rate mean nothing to that backend. The wiring, which knows
// the backend, supplies them; a zero field changes nothing.
type EmbeddedDefaults struct {
	Model        string  // inference.model and trainer.base_model
	LearningRate float64 // trainer.hyperparameters.learning_rate
}

// applyEmbedded applies d when the run uses the embedded backend, to the
// keys that set does not hold.
func (c *Config) applyEmbedded(d EmbeddedDefaults, set map[string]bool) {
	if !c.Embedded() {
		return
	}
	if d.Model != "" && !set["inference.model"] {
		c.Inference.Model = d.Model
	}
	if d.Model != "" && !set["trainer.base_model"] {
		c.Trainer.BaseModel = d.Model
	}
	if d.LearningRate != 0 && !set["trainer.hyperparameters.learning_rate"] {
		c.Trainer.Hyperparameters.LearningRate = d.LearningRate
	}
}
