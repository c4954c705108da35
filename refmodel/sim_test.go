package refmodel

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

// simEpisode plays one episode with the policy directly (no HTTP) on the
// rollout package's table and returns the episode and each philosopher's
// samples (advantage unset).
func simEpisode(t testing.TB, p *Policy, env rollout.EnvConfig, rng *rand.Rand) (rollout.Metrics, float64, [][]Sample) {
	table, err := rollout.NewTable(env)
	if err != nil {
		t.Fatal(err)
	}
	samples := make([][]Sample, env.N)
	actions := make([]string, env.N)
	for !table.Done() {
		for i := range env.N {
			s := table.Observe(i)
			x := FeaturesOf(&s)
			lp := p.LogProbs(&x, 1, AllOutputs)
			a := Pick(&lp, 1, rng.Float64())
			samples[i] = append(samples[i], Sample{X: x, Mask: AllOutputs, Action: a, OldLogProb: lp[a]})
			if a == TextOutput {
				actions[i] = rollout.Invalid
			} else {
				actions[i] = rollout.ToolNames[a]
			}
		}
		table.Resolve(actions)
	}
	m := table.Metrics()
	r, _ := rollout.Score(rollout.DefaultRewardConfig(), m)
	return m, r, samples
}

// simEval plays episodes with p and returns the mean shaped reward and the
// deadlock rate.
func simEval(t testing.TB, p *Policy, episodes int, seed uint64) (reward, deadlock float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	env := rollout.DefaultEnvConfig()
	for e := range episodes {
		env.Seed = int64(seed)*1000 + int64(e)
		m, r, _ := simEpisode(t, p, env, rng)
		if m.Deadlocked {
			deadlock++
		}
		reward += r
	}
	return reward / float64(episodes), deadlock / float64(episodes)
}

// simRun mimics the orchestrator's default run: steps of groups x episodes,
// group-normalised advantages (population std), zero-advantage trajectories
// dropped, one update per step, validation after each step. It returns the
// validation reward of the base and of each step, and the adapters (index 0
// is the fresh one, equivalent to the base).
func simRun(t testing.TB, steps, groups, perGroup, valEpisodes int, tc TrainConfig, seed uint64) ([]float64, []*Adapter) {
	rng := rand.New(rand.NewPCG(seed, 2))
	ad, err := NewAdapter(8, 16, seed)
	if err != nil {
		t.Fatal(err)
	}
	pol := NewPolicy(ad)
	v0, _ := simEval(t, pol, valEpisodes, 1_000_000+seed)
	val := []float64{v0}
	ads := []*Adapter{ad}
	for step := range steps {
		var batch []Sample
		for g := range groups {
			env := rollout.DefaultEnvConfig()
			env.Seed = int64(seed)*100000 + int64(step*groups+g)
			rewards := make([]float64, perGroup)
			eps := make([][][]Sample, perGroup)
			for e := range perGroup {
				_, rewards[e], eps[e] = simEpisode(t, pol, env, rng)
			}
			var mean, sd float64
			for _, r := range rewards {
				mean += r
			}
			mean /= float64(perGroup)
			for _, r := range rewards {
				sd += (r - mean) * (r - mean)
			}
			sd = math.Sqrt(sd / float64(perGroup))
			for e := range perGroup {
				adv := (rewards[e] - mean) / (sd + 1e-6)
				if adv == 0 {
					continue
				}
				for _, traj := range eps[e] {
					for _, s := range traj {
						s.Advantage = adv
						batch = append(batch, s)
					}
				}
			}
		}
		ad, _, err = Train(context.Background(), ad, batch, tc, nil)
		if err != nil {
			t.Fatal(err)
		}
		pol = NewPolicy(ad)
		v, _ := simEval(t, pol, valEpisodes, 1_000_000+seed)
		val = append(val, v)
		ads = append(ads, ad)
	}
	return val, ads
}
