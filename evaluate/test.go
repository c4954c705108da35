package evaluate

import (
	"fmt"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/rollout"
)

// TestSet is the test split of a run's config (DESIGN §11) for one model:
// episodes tables at each size in ns, the i-th table seeded test.seed+i at
// every size, played with the run's env, reward, and validation sampling
// settings. Every checkpoint of every run of the config plays the same
// tables, so their results can be compared table by table.
func TestSet(cfg config.Config, model string, ns []int, episodes int) Set {
	e, inf := cfg.Env, cfg.Inference
	return Set{
		Model:    model,
		Env:      rollout.EnvConfig{Rounds: e.Rounds, Mode: e.Mode, DeadlockPatience: e.DeadlockPatience},
		Reward:   rollout.RewardConfig{Function: cfg.Reward.Function, Weights: cfg.Reward.Weights},
		Sampling: rollout.Sampling{Temperature: float32(cfg.Validation.Temperature), MaxTokens: inf.MaxTokens, ChatTemplateKwargs: inf.ChatTemplateKwargs},
		N:        ns, Episodes: episodes, What: "test",
		Seeds: func(n, i int) (int64, int64) {
			seed := cfg.TestSeed(i)
			return seed, rollout.RequestSeed(seed, n, -3)
		},
		ID: func(n, i int) string { return fmt.Sprintf("%s/test/n%d/e%d", model, n, i) },
	}
}
