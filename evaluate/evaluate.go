// Package evaluate plays a set of held-out episodes with one model and
// summarises them, per table size and overall. A training run's validation
// pass and `grpo eval` both evaluate through it, so episodes, parallelism,
// summaries and the every-episode-failed check are decided here once.
package evaluate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/rollout"
)

// ErrAllFailed matches the error Run returns when every episode errored:
// there is nothing to score.
var ErrAllFailed = errors.New("every episode failed")

// AllFailedError is that error, with the first episode's error.
type AllFailedError struct {
	What  string // as Set.What
	First string // the first episode's error
}

var _ error = (*AllFailedError)(nil)

func (e *AllFailedError) Error() string {
	what := "episode"
	if e.What != "" {
		what = e.What + " episode"
	}
	return fmt.Sprintf("every %s failed; first error: %s", what, e.First)
}

// Is makes errors.Is(err, ErrAllFailed) hold.
func (e *AllFailedError) Is(target error) bool { return target == ErrAllFailed }

// ErrTooManyErrored matches the error Run returns when more episodes
// errored than Options.MaxErroredFraction allows: the figures would be
// biased (episodes that fail are not a random sample: long ones fail more).
var ErrTooManyErrored = errors.New("too many episodes errored")

// TooManyErroredError is that error, with the counts and the first error.
type TooManyErroredError struct {
	What              string
	Errored, Episodes int
	Max               float64
	First             string
}

func (e *TooManyErroredError) Error() string {
	what := "episodes"
	if e.What != "" {
		what = e.What + " episodes"
	}
	return fmt.Sprintf("%d of %d %s errored even after replays, more than the %.3g allowed (inference.max_errored_fraction); first error: %s",
		e.Errored, e.Episodes, what, e.Max, e.First)
}

// Is makes errors.Is(err, ErrTooManyErrored) hold.
func (e *TooManyErroredError) Is(target error) bool { return target == ErrTooManyErrored }

// CheckErrored returns a *TooManyErroredError when more than max of eps
// errored (max < 0 checks nothing), with what naming them.
func CheckErrored(eps []rollout.Episode, max float64, what string) error {
	errored, first := 0, ""
	for _, ep := range eps {
		if ep.Errored {
			if errored == 0 {
				first = ep.Error
			}
			errored++
		}
	}
	if max < 0 || len(eps) == 0 || float64(errored) <= max*float64(len(eps)) {
		return nil
	}
	return &TooManyErroredError{What: what, Errored: errored, Episodes: len(eps), Max: max, First: first}
}

// Seeds gives episode e (0-based) at table size n its table seed and its
// sampling seed.
type Seeds func(n, e int) (table, sample int64)

// Set is the episodes of one evaluation: Episodes at each table size in N,
// in that order, each on its own table.
type Set struct {
	Model    string
	Env      rollout.EnvConfig // N and Seed are set per episode
	Reward   rollout.RewardConfig
	Sampling rollout.Sampling
	N        []int
	Episodes int // per table size
	Seeds    Seeds
	// ID names episode e at table size n, for transcripts and events.
	ID func(n, e int) string
	// Transcripts is how many episodes at each table size (the first
	// ones) keep a round-by-round replay.
	Transcripts int
	// NoConversations leaves every episode's Transcripts (the
	// conversations as sent and sampled) empty, for callers that only
	// score them (rollout.EpisodeSpec.NoTranscripts).
	NoConversations bool
	// What names the episodes in the every-episode-failed error
	// ("validation": "every validation episode failed"); empty says none.
	What string
}

// Specs are the episodes of s, ordered by table size and then episode.
func (s Set) Specs() []rollout.EpisodeSpec {
	specs := make([]rollout.EpisodeSpec, 0, len(s.N)*s.Episodes)
	for _, n := range s.N {
		for e := range s.Episodes {
			table, sample := s.Seeds(n, e)
			env := s.Env
			env.N, env.Seed = n, table
			specs = append(specs, rollout.EpisodeSpec{
				ID: s.ID(n, e), Model: s.Model, Env: env, Reward: s.Reward,
				Sampling: s.Sampling, SampleSeed: sample, KeepRounds: e < s.Transcripts,
				NoTranscripts: s.NoConversations,
			})
		}
	}
	return specs
}

// Options say how episodes are played.
type Options struct {
	Client rollout.Completer
	// Limit bounds requests in flight, shared with other users of the
	// same endpoints; nil means a limiter of Concurrency.
	Limit *rollout.Limiter
	// Concurrency is the number of requests meant to be in flight: episodes
	// are played Concurrency/n+1 at a time, n the first table size.
	Concurrency int
	// OnCall, when set, observes every LLM call.
	OnCall func(action string, d time.Duration, err error)
	// OnEpisode, when set, is called as each episode finishes, from the
	// goroutine that played it.
	OnEpisode func(rollout.Episode)
	// Replays is how many times an episode whose call still fails after
	// the client's retries is played again from its seeds
	// (rollout.Runner.Replays).
	Replays int
	// MaxErroredFraction fails the evaluation when more than this fraction
	// of its episodes errored after replays; 0 tolerates none, a negative
	// value any (only all failing is an error).
	MaxErroredFraction float64
}

// PerN is the summary at one table size.
type PerN struct {
	N     int
	Stats grpo.EpisodeStats
}

// Result is an evaluation: every episode in Set.Specs order, their summary,
// and the summary at each table size.
type Result struct {
	Episodes []rollout.Episode
	Stats    grpo.EpisodeStats
	PerN     []PerN
}

// Run plays the episodes of s and summarises them. It returns the
// context's error if ctx ends first, an error matching ErrAllFailed if
// every episode errored, and one matching ErrTooManyErrored if more than
// o.MaxErroredFraction did. Fewer errored episodes are counted in
// Result.Stats.Errored, which callers must report.
func Run(ctx context.Context, o Options, s Set) (Result, error) {
	specs := s.Specs()
	if len(specs) == 0 {
		return Result{}, errors.New("evaluate: no episodes")
	}
	limit := o.Limit
	if limit == nil {
		limit = rollout.NewLimiter(o.Concurrency)
	}
	runner := &rollout.Runner{Client: o.Client, Limit: limit, OnCall: o.OnCall, Replays: o.Replays}
	parallel := o.Concurrency/max(1, specs[0].Env.N) + 1
	eps := runner.RunAll(ctx, specs, parallel, func(_ int, ep rollout.Episode) {
		if o.OnEpisode != nil {
			o.OnEpisode(ep)
		}
	})
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	r := Result{Episodes: eps, Stats: grpo.SummarizeEpisodes(eps)}
	if r.Stats.Errored == len(eps) {
		return Result{}, &AllFailedError{What: s.What, First: eps[0].Error}
	}
	if err := CheckErrored(eps, o.MaxErroredFraction, s.What); err != nil {
		return Result{}, err
	}
	for i, n := range s.N {
		r.PerN = append(r.PerN, PerN{N: n, Stats: grpo.SummarizeEpisodes(eps[i*s.Episodes : (i+1)*s.Episodes])})
	}
	return r, nil
}

// Evaluation is r as the store records the validation of step's checkpoint.
func (r Result) Evaluation(step int) checkpoint.Evaluation {
	sum := r.Stats
	ev := checkpoint.Evaluation{
		Step: step, Episodes: sum.Episodes, Errored: sum.Errored,
		RewardMean: sum.Reward.Mean, RewardStd: sum.Reward.Std, RewardCI95: sum.Reward.CI95,
		DeadlockRate: sum.DeadlockRate, MealsMean: sum.MealsMean, InvalidRate: sum.InvalidRate,
		Rewards: sum.Rewards,
	}
	for _, p := range r.PerN {
		std := p.Stats.Reward.Std
		ev.PerN = append(ev.PerN, checkpoint.EvalN{N: p.N, Episodes: p.Stats.Episodes - p.Stats.Errored,
			RewardMean: p.Stats.Reward.Mean, DeadlockRate: p.Stats.DeadlockRate, MealsMean: p.Stats.MealsMean,
			InvalidRate: p.Stats.InvalidRate, RewardStd: &std})
	}
	ev.Records = Records(r.Episodes)
	ev.Transcripts = Replays(r.Episodes)
	return ev
}

// Replays is what the store keeps of the episodes that kept their rounds.
func Replays(eps []rollout.Episode) []checkpoint.EpisodeReplay {
	var out []checkpoint.EpisodeReplay
	for _, ep := range eps {
		if !ep.Spec.KeepRounds {
			continue
		}
		rp := checkpoint.EpisodeReplay{ID: ep.Spec.ID, N: ep.Spec.Env.N, Seed: ep.Spec.Env.Seed, Reward: ep.Reward,
			Meals: ep.Metrics.TotalMeals, Deadlock: ep.Metrics.Deadlocked, Errored: ep.Errored,
			Rounds: make([]checkpoint.ReplayRound, len(ep.Rounds))}
		for i, rd := range ep.Rounds {
			moves := make([]checkpoint.ReplayMove, len(rd.Moves))
			for j, m := range rd.Moves {
				moves[j] = checkpoint.ReplayMove{Action: m.Action, OK: m.OK, Forks: m.Forks, Output: m.Output}
			}
			rp.Rounds[i] = checkpoint.ReplayRound{Round: rd.Round, Moves: moves}
		}
		out = append(out, rp)
	}
	return out
}

// Records is what the store keeps of each episode.
func Records(eps []rollout.Episode) []checkpoint.EpisodeRecord {
	out := make([]checkpoint.EpisodeRecord, len(eps))
	for i, ep := range eps {
		m := ep.Metrics
		out[i] = checkpoint.EpisodeRecord{
			N: ep.Spec.Env.N, Seed: ep.Spec.Env.Seed, Reward: ep.Reward,
			Terms: checkpoint.RewardTerms{NoDeadlock: ep.Terms.NoDeadlock, Throughput: ep.Terms.Throughput, Unfairness: ep.Terms.Unfairness, Idle: ep.Terms.Idle},
			Meals: m.TotalMeals, Deadlock: m.Deadlocked, Invalid: m.Invalid, Calls: m.LLMCalls, Errored: ep.Errored,
		}
	}
	return out
}
