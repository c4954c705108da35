package config

import "slices"

// operational lists the settings that do not change what a run trains or
// how its steps are scored, each as a copy from src to dst: where its store
// is (run.db), which servers serve and train its model
// (inference.endpoints; trainer.url, peer and api_key_env), how hard a
// request or a job is tried before it fails (inference.concurrency,
// request_timeout, retries, retry_budget, outage_window,
// max_errored_fraction, trainer.job_timeout) and how many validation
// transcripts are kept (validation.transcripts).
var operational = []func(dst, src *Config){
	func(d, s *Config) { d.Run.DB = s.Run.DB },
	func(d, s *Config) { d.Inference.Endpoints = slices.Clone(s.Inference.Endpoints) },
	func(d, s *Config) {
		d.Trainer.URL, d.Trainer.Peer, d.Trainer.APIKeyEnv = s.Trainer.URL, s.Trainer.Peer, s.Trainer.APIKeyEnv
	},
	func(d, s *Config) { d.Inference.Concurrency = s.Inference.Concurrency },
	func(d, s *Config) { d.Inference.RequestTimeout = s.Inference.RequestTimeout },
	func(d, s *Config) { d.Inference.Retries = s.Inference.Retries },
	func(d, s *Config) { d.Inference.RetryBudget = s.Inference.RetryBudget },
	func(d, s *Config) { d.Inference.OutageWindow = s.Inference.OutageWindow },
	func(d, s *Config) { d.Inference.MaxErroredFraction = s.Inference.MaxErroredFraction },
	func(d, s *Config) { d.Trainer.JobTimeout = s.Trainer.JobTimeout },
	func(d, s *Config) { d.Validation.Transcripts = s.Validation.Transcripts },
}

// Outcome is c with its operational settings (see operational) set to
// their zero values. Two configs with equal Outcomes train the same run:
// `grpo experiment` reuses or resumes a stored run whose Outcome equals the
// file's, so that a change of these settings, of their defaults in a newer
// grpo, or of the servers' addresses (a stack restarted on other ports)
// does not make an experiment retrain.
func (c Config) Outcome() Config {
	var zero Config
	for _, set := range operational {
		set(&c, &zero)
	}
	return c
}

// Relocated is c with to's operational settings: what c trains, on the
// servers and with the timeouts to names. A run resumed with a new config
// (`grpo run --resume RUN --config FILE`, `grpo experiment`) plays the rest
// of its steps this way.
func (c Config) Relocated(to Config) Config {
	for _, set := range operational {
		set(&c, &to)
	}
	return c
}
