package grpo

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

func ep(id string, reward float64, errored bool) rollout.Episode {
	return rollout.Episode{
		Spec:    rollout.EpisodeSpec{ID: id},
		Reward:  reward,
		Errored: errored,
		Transcripts: []rollout.Transcript{
			{Agent: 0, MessagesAndChoices: []json.RawMessage{json.RawMessage(`{"role":"system","content":"s"}`)}},
			{Agent: 1, MessagesAndChoices: []json.RawMessage{json.RawMessage(`{"role":"system","content":"s"}`)}},
		},
	}
}

func TestScoreAndTrajectories(t *testing.T) {
	groups := []Group{
		// Rewards 1, 0, 0 (+1 errored, excluded): mean 1/3, population std
		// sqrt(2)/3: advantages 1.41421, -0.70711, -0.70711.
		{ID: "g1", Seed: 7, Episodes: []rollout.Episode{ep("a", 1, false), ep("x", 5, true), ep("b", 0, false), ep("c", 0, false)}},
		// Constant: no signal, nothing sent.
		{ID: "g2", Seed: 8, Episodes: []rollout.Episode{ep("d", 0.5, false), ep("e", 0.5, false), ep("f", 0.5, false)}},
		// Only one scored episode: no signal.
		{ID: "g3", Seed: 9, Episodes: []rollout.Episode{ep("g", 0.9, false), ep("h", 0, true)}},
	}
	var outs []GroupOutcome
	for _, g := range groups {
		outs = append(outs, Score(g, DefaultAdvantageOptions()))
	}
	if outs[0].Errored != 1 || outs[0].ZeroVariance || !outs[1].ZeroVariance || !outs[2].ZeroVariance {
		t.Fatalf("outcomes = %+v", outs)
	}
	if math.Abs(outs[0].Mean-1.0/3) > 1e-12 || math.Abs(outs[0].Std-math.Sqrt2/3) > 1e-12 {
		t.Fatalf("g1 mean %v std %v", outs[0].Mean, outs[0].Std)
	}
	trs := Trajectories(groups, outs)
	if len(trs) != 6 { // 3 episodes x 2 philosophers from g1 only
		t.Fatalf("%d trajectories, want 6", len(trs))
	}
	if trs[0].Episode != "a" || trs[0].Group != "g1" || trs[0].Reward != 1 || math.Abs(trs[0].Advantage-1.4142106) > 1e-6 {
		t.Fatalf("first trajectory %+v", trs[0])
	}
	if trs[2].Episode != "b" || math.Abs(trs[2].Advantage+0.7071053) > 1e-6 || trs[3].Agent != 1 {
		t.Fatalf("third/fourth trajectory %+v %+v", trs[2], trs[3])
	}
	if len(trs[0].Tools) == 0 {
		t.Fatal("trajectory without tools")
	}
}

func TestTrajectoriesCarrySampling(t *testing.T) {
	a, b := ep("a", 1, false), ep("b", 0, false)
	for _, e := range []*rollout.Episode{&a, &b} {
		e.Spec.Model = "o3-baseline-step-0001"
		e.Spec.Sampling = rollout.Sampling{Temperature: 0.7, MaxTokens: 512, ChatTemplateKwargs: map[string]any{"enable_thinking": false}}
	}
	groups := []Group{{ID: "g1", Episodes: []rollout.Episode{a, b}}}
	trs := Trajectories(groups, []GroupOutcome{Score(groups[0], DefaultAdvantageOptions())})
	if len(trs) != 4 {
		t.Fatalf("%d trajectories, want 4", len(trs))
	}
	want := Sampling{Model: "o3-baseline-step-0001", Temperature: 0.7, TopP: 1, MaxTokens: 512}
	got := trs[0].Sampling
	if got.Model != want.Model || got.Temperature != want.Temperature || got.TopP != want.TopP || got.MaxTokens != want.MaxTokens || got.ChatTemplateKwargs["enable_thinking"] != false || trs[0].PolicyStep != nil {
		t.Fatalf("trajectory sampling %+v (policy step %v), want %+v with enable_thinking false and no policy step", got, trs[0].PolicyStep, want)
	}
}

func TestSamplingOf(t *testing.T) {
	for _, tt := range []struct {
		in         rollout.Sampling
		temp, topP float32
	}{
		{rollout.Sampling{}, 0, 1}, // greedy is 0, not omitted; top_p unset is 1
		{rollout.Sampling{Temperature: 1, TopP: 0.95}, 1, 0.95},
		{rollout.Sampling{Temperature: 0.3, TopP: 0.9}, 0.3, 0.9},
	} {
		s := SamplingOf(rollout.EpisodeSpec{Model: "m", Sampling: tt.in})
		if s.Model != "m" || s.Temperature != tt.temp || s.TopP != tt.topP {
			t.Errorf("SamplingOf(%+v)=%+v, want temperature %v top_p %v", tt.in, s, tt.temp, tt.topP)
		}
	}
}

func TestTrajectoriesKeepZeroAdvantage(t *testing.T) {
	groups := []Group{
		// Rewards 1, 0.5, 0 (+1 errored): mean 0.5, population std
		// sqrt(1/6) = 0.408248: advantages 1.224745, 0, -1.224745.
		{ID: "g1", Episodes: []rollout.Episode{ep("a", 1, false), ep("b", 0.5, false), ep("x", 3, true), ep("c", 0, false)}},
		// Constant: no signal, left out even with the option.
		{ID: "g2", Episodes: []rollout.Episode{ep("d", 0.5, false), ep("e", 0.5, false)}},
	}
	var outs []GroupOutcome
	for _, g := range groups {
		outs = append(outs, Score(g, DefaultAdvantageOptions()))
	}
	if n := len(Trajectories(groups, outs)); n != 4 { // a and c, 2 philosophers each
		t.Fatalf("default: %d trajectories, want 4", n)
	}
	trs := TrajectoriesWith(groups, outs, TrajectoryOptions{KeepZeroAdvantage: true})
	if len(trs) != 6 { // a, b, c x 2 philosophers; nothing of g2 or the errored x
		t.Fatalf("KeepZeroAdvantage: %d trajectories, want 6", len(trs))
	}
	want := []struct {
		episode string
		adv     float64
	}{{"a", 1.224745}, {"a", 1.224745}, {"b", 0}, {"b", 0}, {"c", -1.224745}, {"c", -1.224745}}
	for i, w := range want {
		if trs[i].Episode != w.episode || trs[i].Group != "g1" || math.Abs(trs[i].Advantage-w.adv) > 1e-5 {
			t.Errorf("trajectory %d: episode %s group %s advantage %v, want %s g1 %v", i, trs[i].Episode, trs[i].Group, trs[i].Advantage, w.episode, w.adv)
		}
	}
	if trs[2].Reward != 0.5 || trs[2].Advantage != 0 {
		t.Errorf("zero-advantage trajectory: reward %v advantage %v, want 0.5 and exactly 0", trs[2].Reward, trs[2].Advantage)
	}
}
