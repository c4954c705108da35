package grpo

import "github.com/grpo-dev/grpo/rollout"

// EpisodeStats summarises a set of episodes the way evaluations report
// them. Errored episodes are counted and left out of every other figure:
// failures are not rewards.
type EpisodeStats struct {
	Episodes       int       `json:"episodes"`
	Errored        int       `json:"errored"`
	Reward         Summary   `json:"reward"`
	DeadlockRate   float64   `json:"deadlock_rate"`
	MealsMean      float64   `json:"meals_mean"`
	InvalidRate    float64   `json:"invalid_rate"` // invalid outputs per LLM call
	StarvationMean float64   `json:"starvation_mean"`
	JainMean       float64   `json:"jain_mean"`
	Rewards        []float64 `json:"-"`
}

// SummarizeEpisodes computes EpisodeStats over eps.
func SummarizeEpisodes(eps []rollout.Episode) EpisodeStats {
	s := EpisodeStats{Episodes: len(eps)}
	var deadlocks, meals, starved, calls, invalid int
	var jain float64
	for _, ep := range eps {
		if ep.Errored {
			s.Errored++
			continue
		}
		s.Rewards = append(s.Rewards, ep.Reward)
		if ep.Metrics.Deadlocked {
			deadlocks++
		}
		meals += ep.Metrics.TotalMeals
		starved += ep.Metrics.Starved
		calls += ep.Metrics.LLMCalls
		invalid += ep.Metrics.Invalid
		jain += ep.Metrics.Jain
	}
	s.Reward = Summarize(s.Rewards)
	if k := float64(len(s.Rewards)); k > 0 {
		s.DeadlockRate = float64(deadlocks) / k
		s.MealsMean = float64(meals) / k
		s.StarvationMean = float64(starved) / k
		s.JainMean = jain / k
	}
	if calls > 0 {
		s.InvalidRate = float64(invalid) / float64(calls)
	}
	return s
}
