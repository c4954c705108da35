package refmodel

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
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

type simStats struct {
	deadlock, reward, invalid, meals float64
}

func simEval(t testing.TB, p *Policy, episodes int, seed uint64) simStats {
	rng := rand.New(rand.NewPCG(seed, 1))
	env := rollout.DefaultEnvConfig()
	var st simStats
	calls := 0
	for e := range episodes {
		env.Seed = int64(seed)*1000 + int64(e)
		m, r, _ := simEpisode(t, p, env, rng)
		if m.Deadlocked {
			st.deadlock++
		}
		st.reward += r
		st.invalid += float64(m.Invalid)
		st.meals += float64(m.TotalMeals)
		calls += m.RoundsPlayed * m.N
	}
	k := float64(episodes)
	st.deadlock /= k
	st.reward /= k
	st.meals /= k
	st.invalid /= float64(calls)
	return st
}

// simRun mimics the orchestrator's default run: steps of groups x episodes,
// group-normalised advantages (population std), zero-advantage trajectories
// dropped, one job per step, validation after each step. It returns the
// validation reward of the base and of each step.
func simRun(t testing.TB, steps, groups, perGroup, valEpisodes int, tc TrainConfig, seed uint64) []float64 {
	v, _ := simRun2(t, steps, groups, perGroup, valEpisodes, 0, tc, seed)
	return v
}

// simRun2 also returns, when trueEpisodes > 0, each step's reward measured
// on trueEpisodes episodes.
func simRun2(t testing.TB, steps, groups, perGroup, valEpisodes, trueEpisodes int, tc TrainConfig, seed uint64) ([]float64, []float64) {
	var truth []float64
	measure := func(p *Policy) {
		if trueEpisodes > 0 {
			truth = append(truth, simEval(t, p, trueEpisodes, 5_000_000+seed).reward)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	ad, err := NewAdapter(8, 16, seed)
	if err != nil {
		t.Fatal(err)
	}
	pol := NewPolicy(ad)
	val := []float64{simEval(t, pol, valEpisodes, 1_000_000+seed).reward}
	measure(pol)
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
		val = append(val, simEval(t, pol, valEpisodes, 1_000_000+seed).reward)
		measure(pol)
	}
	return val, truth
}

// TestTune prints the base policy's statistics and simulated default runs;
// it is a tuning aid, run with REFMODEL_TUNE=1.
func TestTune(t *testing.T) {
	if os.Getenv("REFMODEL_TUNE") == "" {
		t.Skip("set REFMODEL_TUNE=1")
	}
	st := simEval(t, BasePolicy(), 4000, 7)
	t.Logf("base: deadlock %.3f reward %.3f invalid %.3f meals %.2f", st.deadlock, st.reward, st.invalid, st.meals)
	for _, lr := range []float64{1, 2, 3, 4} {
		var best, last, base float64
		runs := 8
		curve := make([]float64, 17)
		for s := range runs {
			v := simRun(t, 16, 2, 3, 400, TrainConfig{LearningRate: lr}, uint64(s+1))
			for i := range v {
				curve[i] += v[i] / float64(runs)
			}
			b := math.Inf(-1)
			for _, x := range v[1:] {
				b = max(b, x)
			}
			best += b / float64(runs)
			last += v[len(v)-1] / float64(runs)
			base += v[0] / float64(runs)
		}
		t.Logf("lr %v: base val %.3f best %.3f last %.3f curve %.2f", lr, base, best, last, curve)
	}
}
