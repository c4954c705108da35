package config

import (
	"bytes"
	"testing"
	"time"
)

// TestOutcome: timeouts, retries, concurrency, the store's path and the
// kept transcripts leave a config's Outcome unchanged; anything that
// changes what is trained or scored changes it.
func TestOutcome(t *testing.T) {
	base := Default()
	same := base
	same.Run.DB = "elsewhere.db"
	same.Inference.Concurrency = 7
	same.Inference.RequestTimeout = Duration(time.Minute)
	same.Inference.Retries = 9
	same.Inference.RetryBudget = Duration(time.Second)
	same.Inference.OutageWindow = Duration(time.Hour)
	same.Inference.MaxErroredFraction = 0.5
	same.Trainer.JobTimeout = Duration(time.Second)
	same.Trainer.APIKeyEnv = "KEY"
	same.Validation.Transcripts = 3
	if !bytes.Equal(base.Outcome().JSON(), same.Outcome().JSON()) {
		t.Fatalf("operational settings changed the outcome:\n%s\n%s", base.Outcome().JSON(), same.Outcome().JSON())
	}
	if bytes.Equal(base.JSON(), same.JSON()) {
		t.Fatal("the test's changes left the config itself unchanged")
	}
	for name, change := range map[string]func(*Config){
		"run.steps":              func(c *Config) { c.Run.Steps++ },
		"run.seed":               func(c *Config) { c.Run.Seed++ },
		"env.rounds":             func(c *Config) { c.Env.Rounds++ },
		"inference.temperature":  func(c *Config) { c.Inference.Temperature += 0.1 },
		"inference.max_tokens":   func(c *Config) { c.Inference.MaxTokens++ },
		"validation.episodes":    func(c *Config) { c.Validation.Episodes++ },
		"trainer.learning_rate":  func(c *Config) { c.Trainer.Hyperparameters.LearningRate *= 2 },
		"inference.episode_reps": func(c *Config) { c.Inference.EpisodeReplays++ },
	} {
		c := base
		change(&c)
		if bytes.Equal(base.Outcome().JSON(), c.Outcome().JSON()) {
			t.Errorf("%s changed and the outcome did not", name)
		}
	}
}
