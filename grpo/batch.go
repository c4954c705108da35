package grpo

import (
	"encoding/json"
	"math"

	"github.com/grpo-dev/grpo/rollout"
)

// Group is the episodes of one group: one table config and seed, episodes
// differing only by sampling.
type Group struct {
	ID       string
	Seed     int64
	Episodes []rollout.Episode
}

// GroupOutcome is a group's statistics over its scored episodes.
type GroupOutcome struct {
	ID           string
	Seed         int64
	Rewards      []float64 // scored episodes only
	Advantages   []float64 // aligned with Rewards
	Mean, Std    float64   // population std, as the estimator's default
	Errored      int
	ZeroVariance bool // no signal: all rewards equal, or fewer than two scored
}

// Score computes a group's advantages. Errored episodes are excluded; a
// group with fewer than two scored episodes, or equal rewards, carries no
// signal (ZeroVariance) and gets zero advantages.
func Score(g Group, opt AdvantageOptions) GroupOutcome {
	out := GroupOutcome{ID: g.ID, Seed: g.Seed}
	for _, ep := range g.Episodes {
		if ep.Errored {
			out.Errored++
			continue
		}
		out.Rewards = append(out.Rewards, ep.Reward)
	}
	out.Mean, out.Std = meanPopStd(out.Rewards)
	out.ZeroVariance = len(out.Rewards) < 2 || ZeroVariance(out.Rewards)
	out.Advantages = Advantages(out.Rewards, opt)
	return out
}

func meanPopStd(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	m, v := meanVar(xs)
	n := float64(len(xs))
	return m, math.Sqrt(v * (n - 1) / n)
}

// TrajectoryOptions change which scored trajectories Trajectories keeps.
type TrajectoryOptions struct {
	// KeepZeroAdvantage keeps the trajectories whose advantage is 0 in
	// groups that carry signal (not ZeroVariance). A trainer that
	// recomputes group statistics from what it receives (OpenPipe ART
	// divides by the group's standard deviation) needs them, since they
	// count in the statistics. Groups without signal are still left out:
	// every advantage in them is 0, so they train nothing anywhere.
	KeepZeroAdvantage bool
}

// Trajectory is one philosopher's conversation of a scored episode, as a
// trainer learns from it: the conversation as sent and sampled (see
// rollout.Transcript), the tools it was offered, the episode's reward and
// advantage, and how its turns were sampled. PolicyStep, when set, is the
// step of the adapter that sampled them (an asynchronous pipeline samples
// with an older policy than the one being trained). The trainer client
// turns it into its wire form.
type Trajectory struct {
	MessagesAndChoices []json.RawMessage
	Tools              json.RawMessage
	Reward, Advantage  float64
	Group, Episode     string
	Agent              int
	Sampling           Sampling
	PolicyStep         *int
}

// Sampling is what a trajectory's turns were sampled with (DESIGN §5): the
// served model name (the base model or an adapter) and the request
// parameters as sent.
type Sampling struct {
	Model              string
	Temperature, TopP  float32
	MaxTokens          int
	ChatTemplateKwargs map[string]any
}

// Trajectories turns scored groups into trajectories: every
// philosopher's conversation of a scored episode carries the episode's
// reward and advantage, and the sampling settings its requests were sent
// with; trajectories with advantage 0 are not sent. PolicyStep is left
// unset: the caller that knows which adapter sampled an episode sets it.
func Trajectories(groups []Group, outcomes []GroupOutcome) []Trajectory {
	return TrajectoriesWith(groups, outcomes, TrajectoryOptions{})
}

// TrajectoriesWith is Trajectories with options: with KeepZeroAdvantage,
// the zero-advantage trajectories of groups with signal are kept.
func TrajectoriesWith(groups []Group, outcomes []GroupOutcome, opt TrajectoryOptions) []Trajectory {
	var out []Trajectory
	tools := rollout.ToolsJSON()
	for gi, g := range groups {
		k := 0 // index into the outcome's scored episodes
		for _, ep := range g.Episodes {
			if ep.Errored {
				continue
			}
			adv := outcomes[gi].Advantages[k]
			k++
			if adv == 0 && !(opt.KeepZeroAdvantage && !outcomes[gi].ZeroVariance) {
				continue
			}
			sampling := SamplingOf(ep.Spec)
			for _, tr := range ep.Transcripts {
				out = append(out, Trajectory{
					MessagesAndChoices: tr.MessagesAndChoices,
					Tools:              tools,
					Reward:             ep.Reward,
					Advantage:          adv,
					Group:              g.ID,
					Episode:            ep.Spec.ID,
					Agent:              tr.Agent,
					Sampling:           sampling,
				})
			}
		}
	}
	return out
}

// SamplingOf is what an episode's requests were sampled with: the served
// model name and the parameters the agent sent (top_p unset is 1).
func SamplingOf(spec rollout.EpisodeSpec) Sampling {
	return Sampling{
		Model:              spec.Model,
		Temperature:        spec.Sampling.Temperature,
		TopP:               spec.Sampling.EffectiveTopP(),
		MaxTokens:          spec.Sampling.MaxTokens,
		ChatTemplateKwargs: spec.Sampling.ChatTemplateKwargs,
	}
}
