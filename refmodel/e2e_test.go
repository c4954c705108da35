package refmodel

import (
	"context"
	"fmt"
	"github.com/grpo-dev/grpo/inference"
	"math"
	"net/http"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// playEpisodes plays episodes through the real episode runner against the
// server over HTTP, several at a time.
func playEpisodes(t *testing.T, url, model string, env rollout.EnvConfig, count int, seed int64) []rollout.Episode {
	t.Helper()
	runner := &rollout.Runner{
		Client: inference.NewChatClient(url+"/v1", inference.ChatOptions{}),
		Limit:  rollout.NewLimiter(32),
	}
	eps := make([]rollout.Episode, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range eps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			e := env
			e.Seed = seed + int64(i)
			eps[i] = runner.Run(context.Background(), rollout.EpisodeSpec{
				ID:         fmt.Sprintf("e%d", i),
				Model:      model,
				Env:        e,
				Reward:     rollout.DefaultRewardConfig(),
				Sampling:   rollout.Sampling{Temperature: 1},
				SampleSeed: seed*7919 + int64(i),
			})
		}()
	}
	wg.Wait()
	for i, e := range eps {
		if e.Errored {
			t.Fatalf("episode %d: %s", i, e.Error)
		}
	}
	return eps
}

// TestBasePolicyDeadlocks: at the study's setting (n=5, simultaneous, 5
// rounds, deadlock patience 1, temperature 1) the base policy deadlocks in
// most episodes and scores a low shaped reward, as Qwen3-14B did.
func TestBasePolicyDeadlocks(t *testing.T) {
	_, srv := mustServe(t, 1)
	eps := playEpisodes(t, srv.URL, BaseModelName, rollout.DefaultEnvConfig(), 200, 1)
	var deadlocks, reward, invalid, calls float64
	for _, e := range eps {
		if e.Metrics.Deadlocked {
			deadlocks++
		}
		reward += e.Reward
		invalid += float64(e.Metrics.Invalid)
		calls += float64(e.Metrics.LLMCalls)
	}
	rate, mean := deadlocks/200, reward/200
	t.Logf("base policy, 200 episodes: deadlock rate %.3f, mean shaped reward %.3f, invalid outputs %.3f", rate, mean, invalid/calls)
	if rate < 0.6 {
		t.Errorf("deadlock rate %.3f, want >= 0.6", rate)
	}
	if mean >= 0.3 {
		t.Errorf("mean shaped reward %.3f, want < 0.3", mean)
	}
	if r := invalid / calls; r < 0.005 || r > 0.08 {
		t.Errorf("invalid output rate %.3f, want a few percent", r)
	}
}

// groupAdvantages is the orchestrator's default estimator: (r - mean) /
// (population std + 1e-6) within the group.
func groupAdvantages(eps []rollout.Episode) []float64 {
	var mean, sd float64
	for _, e := range eps {
		mean += e.Reward
	}
	mean /= float64(len(eps))
	for _, e := range eps {
		sd += (e.Reward - mean) * (e.Reward - mean)
	}
	sd = math.Sqrt(sd / float64(len(eps)))
	adv := make([]float64, len(eps))
	for i, e := range eps {
		adv[i] = (e.Reward - mean) / (sd + 1e-6)
	}
	return adv
}

// TestTrainingLoopOverHTTP runs a few steps of the orchestrator's loop
// against both APIs: episodes through the runner, a job per step chained on
// the previous adapter, the adapter hot-loaded and sampled next. The trainer
// must see the sampled choices exactly as the server scored them: under the
// parent adapter every sample's ratio is 1.
func TestTrainingLoopOverHTTP(t *testing.T) {
	_, srv := mustServe(t, 3)
	model := BaseModelName
	var parent *trainer.Adapter
	for step := 1; step <= 3; step++ {
		var trajs []trainer.Trajectory
		for g := range 2 {
			env := rollout.DefaultEnvConfig()
			eps := playEpisodes(t, srv.URL, model, env, 3, int64(100*step+10*g))
			for i, adv := range groupAdvantages(eps) {
				if adv == 0 {
					continue
				}
				for _, tr := range eps[i].Transcripts {
					trajs = append(trajs, trainer.Trajectory{
						MessagesAndChoices: tr.MessagesAndChoices,
						Tools:              rollout.ToolsJSON(),
						Reward:             eps[i].Reward,
						Advantage:          adv,
						Group:              fmt.Sprintf("g%d", g),
						Episode:            eps[i].Spec.ID,
						Agent:              tr.Agent,
					})
				}
			}
		}
		if len(trajs) == 0 {
			continue
		}
		samples, err := SamplesOf(trajs)
		if err != nil {
			t.Fatal(err)
		}
		served := BasePolicy()
		if parent != nil {
			a, err := LoadAdapter(parent.Path)
			if err != nil {
				t.Fatal(err)
			}
			served = NewPolicy(a)
		}
		for i, s := range samples {
			if lp := served.LogProbs(&s.X, 1, s.Mask)[s.Action]; math.Abs(lp-s.OldLogProb) > 1e-12 {
				t.Fatalf("step %d sample %d: server logged %v, trainer computes %v", step, i, s.OldLogProb, lp)
			}
		}

		id := fmt.Sprintf("loop/step-%04d", step)
		out := fmt.Sprintf("loop-step-%04d", step)
		if code, j := createJob(t, srv.URL, jobRequest(id, out, parent, trajs...)); code != http.StatusAccepted {
			t.Fatalf("create %s: %d %+v", id, code, j)
		}
		j := waitJob(t, srv.URL, id)
		if j.State != trainer.StateSucceeded {
			t.Fatalf("step %d job %+v", step, j)
		}
		loadServed(t, srv.URL, j.Adapter)
		parent, model = j.Adapter, j.Adapter.Name
	}
	if parent == nil {
		t.Fatal("no step had a non-zero advantage")
	}
}

// TestLearnsFromAdvantages simulates the orchestrator's default run (16
// steps of 2 groups x 3 episodes at n=5, group-normalised advantages, one
// job per step at the default hyperparameters, best step chosen on 24
// validation episodes) on the rollout table, calling the policy and Train
// directly. Across seeds the chosen step must be far better than the base.
func TestLearnsFromAdvantages(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 8 training runs")
	}
	const runs = 8
	var base, chosen, baseDL, chosenDL float64
	improved := 0
	for s := range runs {
		seed := uint64(s + 1)
		val, ads := simRun(t, 16, 2, 3, 24, TrainConfig{}, seed)
		best := 0
		for i := range val {
			if val[i] > val[best] {
				best = i
			}
		}
		// Re-measure the base and the chosen step on many fresh episodes.
		b, bdl := simEval(t, BasePolicy(), 400, 9_000_000+seed)
		c, cdl := simEval(t, NewPolicy(ads[best]), 400, 9_000_000+seed)
		base += b / runs
		chosen += c / runs
		baseDL += bdl / runs
		chosenDL += cdl / runs
		if c > b+0.2 {
			improved++
		}
	}
	t.Logf("mean over %d runs: shaped reward base %.3f, chosen step %.3f; deadlock rate base %.3f, chosen step %.3f; %d runs improved by > 0.2",
		runs, base, chosen, baseDL, chosenDL, improved)
	if chosen < base+0.3 || improved < runs/2 {
		t.Fatalf("chosen step %.3f vs base %.3f, %d/%d runs improved: the policy does not learn", chosen, base, improved, runs)
	}
}
