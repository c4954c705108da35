package config

// Outcome is c with the settings that do not change what a run trains or
// how its steps are scored set to their zero values: where its store is
// (run.db), how hard a request or a job is tried before it fails
// (inference.concurrency, request_timeout, retries, retry_budget,
// outage_window, max_errored_fraction, trainer.job_timeout), where the
// trainer's key is read from (trainer.api_key_env) and how many
// validation transcripts are kept (validation.transcripts). Two configs
// with equal Outcomes train the same run: `grpo experiment` reuses a
// stored run whose Outcome equals the file's, so that a change of these
// settings, or of their defaults in a newer grpo, does not make a
// finished experiment retrain.
func (c Config) Outcome() Config {
	c.Run.DB = ""
	c.Inference.Concurrency = 0
	c.Inference.RequestTimeout = 0
	c.Inference.Retries = 0
	c.Inference.RetryBudget = 0
	c.Inference.OutageWindow = 0
	c.Inference.MaxErroredFraction = 0
	c.Trainer.JobTimeout = 0
	c.Trainer.APIKeyEnv = ""
	c.Validation.Transcripts = 0
	return c
}
