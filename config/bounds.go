package config

import (
	"fmt"
	"strings"
	"time"
)

// Bound is the accepted range of one setting that a config key and a CLI
// flag may both set (inference.concurrency and grpo eval --concurrency):
// both check the value with Check, so they accept the same values and say
// the same thing about the others. The maxima are far above any sensible
// value; they catch a typo (concurrency: 2000000, max_tokens: 1e9) before
// it fails later in an obscure way.
type Bound[T int | time.Duration] struct {
	Min, Max T
	// Low says what is accepted, for a value below Min ("need at least
	// 1 request in flight").
	Low string
	// High says why Max and what to do instead, for a value above it.
	High string
}

// Check returns "" when v is accepted, or what is accepted, to follow the
// value in an error: "inference.concurrency: is 2000000; at most 100000
// requests in flight ...", "--concurrency 2000000: at most 100000 ...".
func (b Bound[T]) Check(v T) string {
	switch {
	case v < b.Min:
		return b.Low
	case v > b.Max:
		return fmt.Sprintf("at most %s %s", b.MaxString(), b.High)
	}
	return ""
}

// MaxString writes Max as a config would: 100000, 24h.
func (b Bound[T]) MaxString() string { return formatBound(b.Max) }

// formatBound writes a count as a number and a duration as it is written
// in a config: 24h, not 24h0m0s.
func formatBound(v any) string {
	d, ok := v.(time.Duration)
	if !ok {
		return fmt.Sprint(v)
	}
	s := d.String()
	switch {
	case strings.HasSuffix(s, "h0m0s"):
		return strings.TrimSuffix(s, "0m0s")
	case strings.HasSuffix(s, "m0s"):
		return strings.TrimSuffix(s, "0s")
	}
	return s
}

// The bounds of the keys that would only take a large value by mistake,
// most of which grpo eval's flags set too (trainer.job_timeout has no
// flag). Why each maximum is what it is, is said in its High and in
// docs/CONFIG.md.
var (
	// ConcurrencyBound bounds inference.concurrency (--concurrency). Each
	// request in flight holds its own connection: a file descriptor and a
	// local port, of which a client has 28,232 per server address (Linux's
	// default range 32768-60999; 64,511 at most), and about 70 KB of
	// grpo's memory (10,000 in flight took 701-723 MB, docs/PERFORMANCE.md).
	// 100,000 is ten times the most measured, more than a fleet of three
	// replicas can take connections for, and about 7 GB.
	ConcurrencyBound = Bound[int]{
		Min: 1, Max: 100000,
		Low:  "need at least 1 request in flight",
		High: "requests in flight (each holds a connection: a file descriptor and one of the 28,232 local ports a client has per server address); lower it, it is shared by all the endpoints",
	}
	// MaxTokensBound bounds inference.max_tokens (--max-tokens): 2^24 is
	// beyond any model's context window (the longest, Llama 4 Scout's, is
	// 10M tokens; Qwen3-14B's is 32,768, 131,072 with YaRN), and vLLM
	// refuses every request whose max_tokens is beyond the model's
	// max_model_len. An answer here is one tool call.
	MaxTokensBound = Bound[int]{
		Min: 1, Max: 1 << 24,
		Low:  "need at least 1",
		High: "tokens, beyond any model's context window (vLLM refuses every request asking more than the model's max_model_len); an answer is one tool call: 512 is the default",
	}
	// RetriesBound bounds inference.retries (--retries): 100 retries wait
	// 240 to 481 s of backoff at one endpoint (200 ms doubling to 5 s,
	// shortened by up to half at random: 0.2+0.4+0.8+1.6+3.2 + 95 x 5 =
	// 481.2 s). Longer is a matter of time, which inference.retry_budget
	// bounds (its default 2m cuts a series after 28 to 52 retries).
	RetriesBound = Bound[int]{
		Min: 0, Max: 100,
		Low:  "need 0 or more",
		High: "(100 retries already wait 4 to 8 minutes of backoff at one endpoint); to retry for longer, raise the retry budget (inference.retry_budget, grpo eval --retry-budget), which bounds the time",
	}
	// EpisodeReplaysBound bounds inference.episode_replays
	// (--episode-replays). An episode is replayed, from its first round,
	// only after one of its calls failed through all its retries; ten such
	// failures in a row of one episode are not a transient fault that
	// replaying cures.
	EpisodeReplaysBound = Bound[int]{
		Min: 0, Max: 10,
		Low:  "need 0 or more",
		High: "(each replay plays the episode again from its first round, after one of its calls failed through all its retries); to ride out an outage raise inference.outage_window or retry_budget, and to tolerate errored episodes inference.max_errored_fraction",
	}
	// AdaptersKeepBound bounds inference.adapters.keep. Every kept adapter
	// stays loaded on every inference server: a rank-8 adapter of
	// Qwen3-14B on all its projections is 32M parameters, 64 MB in bf16,
	// so 1,000 hold 64 GB of each server's memory. Unloading deletes
	// nothing (but with ART, which is asked to delete the checkpoints not
	// kept).
	AdaptersKeepBound = Bound[int]{
		Min: 1, Max: 1000,
		Low:  "need at least 1 adapter loaded",
		High: "adapters (each stays loaded on every inference server: a rank-8 adapter of Qwen3-14B takes 64 MB, so 1000 take 64 GB); the adapters not kept are unloaded, not deleted (but ART, trainer.kind art, deletes its checkpoints not kept)",
	}
	// OutageWindowBound bounds inference.outage_window (--outage-window):
	// a step that waited a day for an endpoint had better fail and be
	// resumed once the endpoints are back (grpo run --resume; a daemon
	// resumes its runs at start) than hold its episodes in memory longer.
	OutageWindowBound = Bound[time.Duration]{
		Min: 0, Max: 24 * time.Hour,
		Low:  "need 0 (fail at once) or a duration such as 2m",
		High: "(with every endpoint down for a day, let the step fail and resume the run once they are back: grpo run --resume RUN, a daemon's run too)",
	}
	// RequestTimeoutBound bounds inference.request_timeout
	// (--request-timeout), the time one attempt of one request may take.
	// An answer is one tool call (512 tokens by default): even 131,072
	// tokens, Qwen3-14B's longest context, at 10 tokens a second take 3.6
	// hours. An attempt still unanswered after a day is a server that
	// hung, and the timeout is what sends the request to its retries and
	// the endpoint to be drained.
	RequestTimeoutBound = Bound[time.Duration]{
		Min: time.Nanosecond, Max: 24 * time.Hour,
		Low:  "need a duration > 0 such as 60s",
		High: "(one attempt of one request, whose answer is one tool call; an attempt unanswered for a day is a server that hung, and the timeout is what sends the request to its retries and another endpoint)",
	}
	// RetryBudgetBound bounds inference.retry_budget (--retry-budget), the
	// time a request that keeps failing is sent again at the only live
	// endpoint before that endpoint is drained and outage_window begins:
	// as for outage_window, a step whose endpoint failed for a day had
	// better fail and be resumed once it is back.
	RetryBudgetBound = Bound[time.Duration]{
		Min: 0, Max: 24 * time.Hour,
		Low:  "need 0 (drain a failing endpoint at once: retries alone bound a request) or a duration such as 2m",
		High: "(with an endpoint failing every request for a day, let the step fail and resume the run once it is back: grpo run --resume RUN)",
	}
	// JobTimeoutBound bounds trainer.job_timeout, the time one step's
	// trainer job may run (default 30m; it also bounds the job's create).
	// A job trains one step's episodes: the reference trainer takes
	// minutes, and a job still running after a week is hung while the run
	// waits for it.
	JobTimeoutBound = Bound[time.Duration]{
		Min: time.Nanosecond, Max: 7 * 24 * time.Hour,
		Low:  "need a duration > 0 such as 30m",
		High: "(7 days; a job trains one step's episodes, and one still running after a week is hung while the run waits for it)",
	}
)
