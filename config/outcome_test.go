package config

import (
	"bytes"
	"testing"
	"time"
)

// TestOutcome: timeouts, retries, concurrency, the store's path, the
// servers' addresses and the kept transcripts leave a config's Outcome
// unchanged; anything that changes what is trained or scored changes it.
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
	same.Inference.Endpoints = []Endpoint{{URL: "http://127.0.0.1:1/v1"}, {URL: "http://127.0.0.1:2/v1", APIKeyEnv: "K"}}
	same.Trainer.URL, same.Trainer.Peer = "http://127.0.0.1:3", "trainer"
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
		"inference.model":        func(c *Config) { c.Inference.Model += "-other" },
		"trainer.kind":           func(c *Config) { c.Trainer.Kind = TrainerJobs },
		"trainer.base_model":     func(c *Config) { c.Trainer.BaseModel += "-other" },
	} {
		c := base
		change(&c)
		if bytes.Equal(base.Outcome().JSON(), c.Outcome().JSON()) {
			t.Errorf("%s changed and the outcome did not", name)
		}
	}
}

// TestRelocated: a stored run's config relocated to a new one keeps what
// the stored one trains and takes every operational setting of the new.
func TestRelocated(t *testing.T) {
	stored := Default()
	stored.Trainer.Kind = TrainerJobs
	stored.Inference.Endpoints = []Endpoint{{URL: "http://127.0.0.1:1/v1"}}
	stored.Trainer.URL = "http://127.0.0.1:2"
	stored.Trainer.Hyperparameters.LearningRate = 4e-3
	now := stored
	now.Inference.Endpoints = []Endpoint{{URL: "http://127.0.0.1:8/v1"}, {URL: "http://127.0.0.1:9/v1"}}
	now.Trainer.URL, now.Trainer.JobTimeout, now.Inference.Retries = "http://127.0.0.1:7", Duration(time.Hour), 11
	now.Trainer.Hyperparameters.LearningRate = 1 // not operational: stays the stored run's
	got := stored.Relocated(now)
	if len(got.Inference.Endpoints) != 2 || got.Inference.Endpoints[1].URL != "http://127.0.0.1:9/v1" ||
		got.Trainer.URL != "http://127.0.0.1:7" || got.Trainer.JobTimeout != Duration(time.Hour) || got.Inference.Retries != 11 {
		t.Errorf("relocated: endpoints %v, trainer %s, job_timeout %v, retries %d: want the new config's",
			got.Inference.Endpoints, got.Trainer.URL, got.Trainer.JobTimeout, got.Inference.Retries)
	}
	if got.Trainer.Hyperparameters.LearningRate != 4e-3 {
		t.Errorf("relocated learning rate %g: want the stored run's 4e-3", got.Trainer.Hyperparameters.LearningRate)
	}
	now.Inference.Endpoints[0].URL = "changed"
	if got.Inference.Endpoints[0].URL != "http://127.0.0.1:8/v1" {
		t.Error("relocated shares its endpoints with the new config")
	}
	if stored.Inference.Endpoints[0].URL != "http://127.0.0.1:1/v1" || stored.Trainer.URL != "http://127.0.0.1:2" {
		t.Error("Relocated changed the stored config")
	}
}
