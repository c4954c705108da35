package art

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/trainer"
)

// Hand-computed grpo advantages of rewards 0.2, 0.5, 0.8 with the default
// estimator: mean 0.5, population std sqrt(0.06) = 0.24494897427831783,
// so (r-0.5)/(0.24494897427831783+1e-6).
const (
	advLow  = -1.2247398714120012
	advHigh = 1.2247398714120015
)

var tools = json.RawMessage(`[{"type":"function","function":{"name":"take_fork","parameters":{"type":"object","properties":{"side":{"type":"string"}}}}}]`)

func readChoice(t testing.TB) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("testdata/choice.json")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// stepTrajectories is one group of three episodes of two philosophers,
// including the zero-advantage episode e2.
func stepTrajectories(t testing.TB) []trainer.Trajectory {
	choice := readChoice(t)
	var out []trainer.Trajectory
	for _, ep := range []struct {
		id        string
		reward    float64
		advantage float64
	}{{"e1", 0.2, advLow}, {"e2", 0.5, 0}, {"e3", 0.8, advHigh}} {
		for agent := range 2 {
			out = append(out, trainer.Trajectory{
				MessagesAndChoices: []json.RawMessage{
					json.RawMessage(`{"role":"system","content":"You are philosopher 0 & you share forks."}`),
					json.RawMessage(`{"role":"user","content":"Round 1."}`),
					choice,
				},
				Tools: tools, Reward: ep.reward, Advantage: ep.advantage,
				Group: "g1", Episode: ep.id, Agent: agent,
			})
		}
	}
	return out
}

// mustGroups is TrainGroups for f's release: 0.4.0 has no scale_rewards.
func mustGroups(t testing.TB, f *fakeART, trajs []trainer.Trajectory) []TrajectoryGroup {
	t.Helper()
	g, err := TrainGroups(trajs, Protocol{Log: true, ScaleRewards: f.release != "0.4.0"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

var testConfig = TrainConfig{LearningRate: 5e-6, Epsilon: 0.2, EpsilonHigh: 0.28}

func TestTrainSendsAdvantagesAsRewards(t *testing.T) {
	for _, tc := range []struct {
		release      string
		scaleRewards bool // dev_config.scale_rewards sent as false
		// what ART computes from the rewards sent, for trajectories of e1, e2, e3
		wantART [3]float64
	}{
		// No scale_rewards: ART divides by the std of the advantages,
		// 0.24494897427831783/0.24494997427831783 = 0.9999959175337619.
		{"0.4.0", false, [3]float64{-1.2247436466429422, 0, 1.2247436466429424}},
		// scale_rewards false: ART subtracts their mean (0) only; e2's
		// zero-advantage trajectories are not sent.
		{"0.4.12", true, [3]float64{advLow, 0, advHigh}},
		{"0.5.0", true, [3]float64{advLow, 0, advHigh}},
	} {
		t.Run(tc.release, func(t *testing.T) {
			f := newFake(t, tc.release)
			res, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, stepTrajectories(t)), testConfig, nil)
			if err != nil {
				t.Fatalf("Train()=%v", err)
			}
			if res.NothingTrainable || res.StepBefore != 0 || res.StepAfter != 1 || !res.Advanced() {
				t.Fatalf("Train()=%+v, want trained from step 0 to 1", res)
			}
			body := decode(t, f.bodies("/_train_model")[0].Body)
			checkModelJSON(t, body["model"].(map[string]any))
			if got, want := body["config"], map[string]any{"learning_rate": 5e-6, "beta": 0.0}; !mapsEqual(got, want) {
				t.Errorf("config=%v, want %v", got, want)
			}
			wantDev := map[string]any{"epsilon": 0.2, "epsilon_high": 0.28}
			if tc.scaleRewards {
				wantDev["scale_rewards"] = false
			}
			if got := body["dev_config"]; !mapsEqual(got, wantDev) {
				t.Errorf("dev_config=%v, want %v", got, wantDev)
			}
			if body["verbose"] != false {
				t.Errorf("verbose=%v, want false", body["verbose"])
			}
			groups := body["trajectory_groups"].([]any)
			if len(groups) != 1 {
				t.Fatalf("%d groups sent, want 1", len(groups))
			}
			g := groups[0].(map[string]any)
			if ex, ok := g["exceptions"].([]any); !ok || len(ex) != 0 {
				t.Errorf("exceptions=%v, want []", g["exceptions"])
			}
			trs := g["trajectories"].([]any)
			// Sent: the advantages made to sum to exactly 0 (centre moves
			// them by at most a quantum of 2^-49 here).
			wantRewards := []float64{advLow, advLow, 0, 0, advHigh, advHigh}
			wantEpisodeRewards := []float64{0.2, 0.2, 0.5, 0.5, 0.8, 0.8}
			episodes := []int{0, 0, 1, 1, 2, 2}
			if tc.scaleRewards {
				wantRewards = []float64{advLow, advLow, advHigh, advHigh}
				wantEpisodeRewards = []float64{0.2, 0.2, 0.8, 0.8}
				episodes = []int{0, 0, 2, 2}
			}
			if len(trs) != len(wantRewards) {
				t.Fatalf("%d trajectories sent, want %d", len(trs), len(wantRewards))
			}
			var sum float64
			for i, tr := range trs {
				tr := tr.(map[string]any)
				got := tr["reward"].(float64)
				sum += got
				if math.Abs(got-wantRewards[i]) > 0x1p-49 || (wantRewards[i] == 0) != (got == 0) {
					t.Errorf("trajectory %d reward=%v, want the advantage %v", i, got, wantRewards[i])
				}
				m := tr["metrics"].(map[string]any)
				if got := m[MetricReward].(float64); got != wantEpisodeRewards[i] {
					t.Errorf("trajectory %d metrics.grpo_reward=%v, want %v", i, got, wantEpisodeRewards[i])
				}
				md := tr["metadata"].(map[string]any)
				if md[MetaGroup] != "g1" || md[MetaAgent] != float64(i%2) {
					t.Errorf("trajectory %d metadata=%v", i, md)
				}
			}
			if sum != 0 {
				t.Errorf("rewards sent sum to %v, want exactly 0", sum)
			}
			for i, a := range f.advantages[0] {
				if want := tc.wantART[episodes[i]]; math.Abs(a-want) > 1e-12 || (want == 0) != (a == 0) {
					t.Errorf("ART advantage of trajectory %d = %v, want %v", i, a, want)
				}
			}
		})
	}
}

func mapsEqual(got any, want map[string]any) bool {
	g, ok := got.(map[string]any)
	if !ok || len(g) != len(want) {
		return false
	}
	for k, v := range want {
		if g[k] != v {
			return false
		}
	}
	return true
}

func TestTrainKeepsChoicesByteForByte(t *testing.T) {
	f := newFake(t, "0.4.12")
	if _, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, stepTrajectories(t)), testConfig, nil); err != nil {
		t.Fatalf("Train()=%v", err)
	}
	body := f.bodies("/_train_model")[0].Body
	choice := readChoice(t)
	if got := bytes.Count(body, choice); got != 4 {
		t.Fatalf("the choice appears %d times byte for byte in the body, want 4 (the zero-advantage trajectories are not sent to 0.4.12)", got)
	}
	for _, s := range [][]byte{[]byte(`philosopher 0 & you`), tools} {
		if !bytes.Contains(body, s) {
			t.Fatalf("body lacks %s as given", s)
		}
	}
}

func TestTrainGroupsRefusesChoiceWithoutLogprobs(t *testing.T) {
	trajs := stepTrajectories(t)
	trajs[3].MessagesAndChoices = append(trajs[3].MessagesAndChoices,
		json.RawMessage(`{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":null}`))
	_, err := TrainGroups(trajs, Protocol{})
	if err == nil || !strings.Contains(err.Error(), "group g1 episode e2 agent 1 item 3") {
		t.Fatalf("TrainGroups()=%v, want an error naming group g1 episode e2 agent 1 item 3", err)
	}
}

func TestTrainGroupsRefusesTextTokens(t *testing.T) {
	trajs := stepTrajectories(t)
	trajs[5].MessagesAndChoices[2] = json.RawMessage(`{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","logprobs":{"content":[{"token":"token_id:1","logprob":-0.5,"top_logprobs":[]},{"token":"hi","logprob":-0.1,"top_logprobs":[]}]}}`)
	_, err := TrainGroups(trajs, Protocol{})
	if err == nil || !strings.Contains(err.Error(), `agent 1 item 2 token 1: "hi" is not in vLLM's token_id:<n> form`) {
		t.Fatalf("TrainGroups()=%v, want a refusal naming token 1", err)
	}
}

func TestTrainRefusesDroppedZeroAdvantages(t *testing.T) {
	var kept []trainer.Trajectory
	for _, tr := range stepTrajectories(t) {
		if tr.Advantage != 0 {
			kept = append(kept, tr)
		}
	}
	// Without scale_rewards ART would divide by their std, 1.2247398714120012.
	f := newFake(t, "0.4.0")
	_, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, kept), testConfig, nil)
	if err == nil || !strings.Contains(err.Error(), "standard deviation 1.22473987") {
		t.Fatalf("Train()=%v, want a refusal naming the std 1.2247...", err)
	}
	if n := len(f.bodies("/_train_model")); n != 0 {
		t.Fatalf("/_train_model sent %d times", n)
	}
	// With scale_rewards=false nothing is rescaled: accepted.
	f = newFake(t, "0.4.12")
	if _, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, kept), testConfig, nil); err != nil {
		t.Fatalf("Train() on 0.4.12 = %v", err)
	}
	// Advantages that do not average 0 are refused everywhere.
	off := stepTrajectories(t)
	for i := range off {
		off[i].Advantage += 0.5
	}
	if _, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, off), testConfig, nil); err == nil || !strings.Contains(err.Error(), "average 0.5") {
		t.Fatalf("Train()=%v, want a refusal naming the average 0.5", err)
	}
}

func TestTrainStreamParsing(t *testing.T) {
	f := newFake(t, "0.5.0")
	f.train = func(w http.ResponseWriter, r *http.Request, f *fakeART) {
		f.streamLines(w, []string{
			`{"loss": 0.5, "grad_norm": 2.0, "policy_loss": 0.5, "entropy": 1.0, "kl_div": 0.125, "num_gradient_steps": 3}`,
			``,
			`{"loss": 0.25, "grad_norm": 1.0, "policy_loss": 0.25, "entropy": 0.5, "kl_div": 0.0625, "num_gradient_steps": 3}`,
			`{"loss": -0.25, "grad_norm": 3.0, "policy_loss": -0.25, "entropy": 1.5, "kl_div": 0.3125, "num_gradient_steps": 3, "note": "x"}`,
		})
		f.advance()
	}
	var seen []Metrics
	res, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, stepTrajectories(t)), testConfig, func(m Metrics) { seen = append(seen, m) })
	if err != nil {
		t.Fatalf("Train()=%v", err)
	}
	if len(seen) != 3 {
		t.Fatalf("onProgress called %d times, want 3", len(seen))
	}
	if m := seen[1]; m.GradientStep != 2 || m.GradientSteps != 3 || m.Loss != 0.25 || m.GradNorm != 1 || m.KL != 0.0625 || m.Entropy != 0.5 {
		t.Fatalf("second line %+v", m)
	}
	if _, ok := seen[2].Values["note"]; ok {
		t.Fatalf("a string value was kept as a number: %v", seen[2].Values)
	}
	// Means: loss (0.5+0.25-0.25)/3, grad_norm (2+1+3)/3, kl (0.125+0.0625+0.3125)/3.
	want := trainer.Metrics{Loss: 0.5 / 3, GradNorm: 2, KL: 0.5 / 3}
	if res.GradientSteps != 3 || res.NothingTrainable || math.Abs(res.Metrics.Loss-want.Loss) > 1e-15 ||
		res.Metrics.GradNorm != want.GradNorm || math.Abs(res.Metrics.KL-want.KL) > 1e-15 {
		t.Fatalf("Train()=%+v, want 3 steps and metrics %+v", res, want)
	}
}

func TestTrainNothingTrainable(t *testing.T) {
	flat := stepTrajectories(t)
	for i := range flat {
		flat[i].Advantage = 0
	}
	for _, tc := range []struct {
		release  string
		advanced bool
	}{
		{"0.4.0", false}, // empty stream, step kept
		{"0.4.12", true}, // empty stream, checkpoint moved to the next step
	} {
		f := newFake(t, tc.release)
		res, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, flat), testConfig, nil)
		if err != nil {
			t.Fatalf("%s: Train()=%v", tc.release, err)
		}
		if !res.NothingTrainable || res.GradientSteps != 0 || res.Advanced() != tc.advanced {
			t.Fatalf("%s: Train()=%+v, want nothing trainable, advanced %v", tc.release, res, tc.advanced)
		}
	}
}

func TestTrainBrokenStreams(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter, f *fakeART)
		want  string // part of the error
	}{
		{"broken line", func(w http.ResponseWriter, f *fakeART) {
			f.streamLines(w, []string{`{"loss": 0.5, "num_gradient_steps": 2}`, `{"loss": 0.2, "num_gra`, `{"loss": 0.1, "num_gradient_steps": 2}`})
		}, "line 2: not a JSON object"},
		{"dies mid-stream", func(w http.ResponseWriter, f *fakeART) {
			f.streamLines(w, []string{`{"loss": 0.5, "num_gradient_steps": 3}`})
			panic(http.ErrAbortHandler) // the connection drops without the chunked trailer
		}, "unexpected EOF"},
		{"ends early", func(w http.ResponseWriter, f *fakeART) {
			f.streamLines(w, []string{`{"loss": 0.5, "num_gradient_steps": 3}`})
		}, "ended after 1 of 3 gradient steps"},
		{"ends inside a line", func(w http.ResponseWriter, f *fakeART) {
			io.WriteString(w, `{"loss": 0.5, "num_gradient_steps": 1}`)
		}, "stream ended inside a line"},
		{"500 before streaming", func(w http.ResponseWriter, f *fakeART) {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "Internal Server Error")
		}, "500 Internal Server Error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, "0.4.12")
			f.train = func(w http.ResponseWriter, r *http.Request, f *fakeART) { tc.serve(w, f) }
			_, err := f.client(t).Train(context.Background(), testModel(), mustGroups(t, f, stepTrajectories(t)), testConfig, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Train()=%v, want an error containing %q", err, tc.want)
			}
			if n := len(f.bodies("/_train_model")); n != 1 {
				t.Fatalf("/_train_model sent %d times, want 1 (never retried)", n)
			}
		})
	}
}

func TestTrainBrokenLineIsStreamError(t *testing.T) {
	_, err := readStream(strings.NewReader("{\"loss\": 1}\n[1, 2]\n"), nil)
	var se *StreamError
	if !errors.As(err, &se) || !errors.Is(err, ErrStreamBroken) || se.Line != 2 {
		t.Fatalf("readStream()=%v, want a *StreamError at line 2", err)
	}
}

func TestTrainContextCancel(t *testing.T) {
	f := newFake(t, "0.4.12")
	f.train = func(w http.ResponseWriter, r *http.Request, f *fakeART) {
		f.streamLines(w, []string{`{"loss": 0.5, "num_gradient_steps": 2}`})
		<-r.Context().Done() // ART keeps training; the client went away
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := f.client(t).Train(ctx, testModel(), mustGroups(t, f, stepTrajectories(t)), testConfig, func(Metrics) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Train()=%v, want context.Canceled", err)
	}
}

func TestValidateAdvantage(t *testing.T) {
	old := Protocol{Releases: "0.4.0 to 0.5.7"}
	for _, tc := range []struct {
		opt  grpo.AdvantageOptions
		want string // "" when accepted on a server without scale_rewards
	}{
		{grpo.DefaultAdvantageOptions(), ""},
		{grpo.AdvantageOptions{StdNormalize: false, Std: grpo.StdPopulation, Baseline: grpo.BaselineMean}, "grpo.advantage.std_normalize"},
		{grpo.AdvantageOptions{StdNormalize: true, Std: grpo.StdUnbiased, Baseline: grpo.BaselineMean}, "grpo.advantage.std"},
		{grpo.AdvantageOptions{StdNormalize: true, Std: grpo.StdPopulation, Baseline: grpo.BaselineLeaveOneOut}, "grpo.advantage.baseline"},
	} {
		err := ValidateAdvantage(tc.opt, old)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want+":")) {
			t.Errorf("ValidateAdvantage(%+v)=%v, want %q", tc.opt, err, tc.want)
		}
		if err := ValidateAdvantage(tc.opt, Protocol{ScaleRewards: true}); err != nil {
			t.Errorf("ValidateAdvantage(%+v) with scale_rewards = %v, want nil", tc.opt, err)
		}
	}
}

func TestTrainConfigFrom(t *testing.T) {
	got, err := TrainConfigFrom(trainer.Hyperparameters{LearningRate: 5e-6, Epsilon: 0.2, EpsilonHigh: 0.28, KLBeta: 0.01, Epochs: 1})
	if want := (TrainConfig{LearningRate: 5e-6, Beta: 0.01, Epsilon: 0.2, EpsilonHigh: 0.28}); err != nil || got != want {
		t.Fatalf("TrainConfigFrom()=%+v, %v; want %+v", got, err, want)
	}
	if _, err := TrainConfigFrom(trainer.Hyperparameters{LearningRate: 5e-6, Epochs: 2}); err == nil || !strings.Contains(err.Error(), "trainer.hyperparameters.epochs") {
		t.Fatalf("TrainConfigFrom(epochs 2)=%v, want a refusal naming the key", err)
	}
}

func TestRunJob(t *testing.T) {
	f := newFake(t, "0.5.0")
	f.step = 2
	req := trainer.JobRequest{
		ID: "dp5-shaped/step-0003", BaseModel: "Qwen/Qwen3-14B", LoRA: testModel().LoRA,
		Hyperparameters: trainer.Hyperparameters{LearningRate: 5e-6, Epsilon: 0.2, EpsilonHigh: 0.28, Epochs: 1},
		Trajectories:    stepTrajectories(t),
	}
	var updates []trainer.Job
	job, res, err := f.client(t).RunJob(context.Background(), testModel(), req, func(j trainer.Job) { updates = append(updates, j) })
	if err != nil {
		t.Fatalf("RunJob()=%v", err)
	}
	// The default fake streams two lines: loss 0.5 and 0.25, grad_norm 1.5 and 0.5.
	if len(updates) != 2 || updates[0].Progress != 0.5 || updates[1].Progress != 1 || updates[0].State != trainer.StateRunning || updates[0].Metrics.Loss != 0.5 {
		t.Fatalf("updates %+v, want progress 0.5 then 1 while running", updates)
	}
	if job.ID != req.ID || job.State != trainer.StateSucceeded || job.Adapter == nil || job.Adapter.Name != "dp5-shaped" ||
		job.Metrics.Loss != 0.375 || job.Metrics.GradNorm != 1 || res.StepBefore != 2 || res.StepAfter != 3 {
		t.Fatalf("RunJob()=%+v, %+v; want succeeded, adapter dp5-shaped, loss 0.375, grad_norm 1", job, res)
	}

	req.LoRA.Rank = 16
	job, _, err = f.client(t).RunJob(context.Background(), testModel(), req, nil)
	if err == nil || job.State != trainer.StateFailed || !strings.Contains(err.Error(), "LoRA") {
		t.Fatalf("RunJob(rank 16)=%+v, %v; want a failed job naming the LoRA", job, err)
	}
	if n := len(f.bodies("/_train_model")); n != 1 {
		t.Fatalf("/_train_model sent %d times, want 1", n)
	}
}

func TestCentre(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in, out []float64
	}{
		// Already exact: total 2, quantum 2^-50, nothing moves.
		{"exact", []float64{1, -0.5, -0.5, 0}, []float64{1, -0.5, -0.5, 0}},
		// Total 1.5, quantum 2^-51; the sum is 2 quanta over, taken off the
		// largest value.
		{"residual", []float64{0.75, -0.25, -0.5 + 0x1p-50}, []float64{0.75 - 0x1p-50, -0.25, -0.5 + 0x1p-50}},
		// grpo's rounding of r - mean (1e-17, under half a quantum of
		// 2^-52) becomes the exact 0 ART skips.
		{"rounding to zero", []float64{1, 1e-17, -1}, []float64{1, 0, -1}},
		// Off by far more than rounding: left alone for Train to refuse.
		{"not rounding", []float64{1.5, 0.5}, []float64{1.5, 0.5}},
		{"all zero", []float64{0, 0}, []float64{0, 0}},
	} {
		got := append([]float64(nil), tc.in...)
		centre(got)
		for i := range got {
			if got[i] != tc.out[i] {
				t.Errorf("%s: centre(%v)=%v, want %v", tc.name, tc.in, got, tc.out)
				break
			}
		}
	}
	// Python sums 0.1 + 0.2 - 0.3 to 5.551115123125783e-17, so ART's mean
	// was not 0. Centred, every order sums to exactly 0.
	a := []float64{0.1, 0.2, -0.3}
	if s := a[0] + a[1] + a[2]; s == 0 {
		t.Fatalf("0.1+0.2-0.3 = 0 in float64; the test needs a residual")
	}
	centre(a)
	for _, o := range [][3]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
		if s := a[o[0]] + a[o[1]] + a[o[2]]; s != 0 {
			t.Errorf("centred %v summed in order %v = %v, want 0", a, o, s)
		}
	}
	for i, want := range []float64{0.1, 0.2, -0.3} {
		if math.Abs(a[i]-want) > 0x1p-52 {
			t.Errorf("centred value %d = %v, moved more than 2^-52 from %v", i, a[i], want)
		}
	}
}

func TestReadStreamNonFinite(t *testing.T) {
	// Python's json.dumps of a diverged step, then a normal one; a string
	// holding the words stays a string.
	stream := `{"loss": NaN, "grad_norm": Infinity, "entropy": -Infinity, "policy_loss": 0.5, "note": "NaN Infinity \"x\"", "num_gradient_steps": 2}` + "\n" +
		`{"loss": 0.25, "grad_norm": 1.0, "policy_loss": 0.25, "num_gradient_steps": 2}` + "\n"
	lines, err := readStream(strings.NewReader(stream), nil)
	if err != nil {
		t.Fatalf("readStream()=%v", err)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	nf := lines[0].NonFinite
	if !math.IsNaN(nf["loss"]) || !math.IsInf(nf["grad_norm"], 1) || !math.IsInf(nf["entropy"], -1) || len(nf) != 3 {
		t.Fatalf("line 1 NonFinite=%v, want loss NaN, grad_norm +Inf, entropy -Inf", nf)
	}
	if v := lines[0].Values; v["policy_loss"] != 0.5 || v["num_gradient_steps"] != 2 || len(v) != 2 {
		t.Fatalf("line 1 Values=%v, want policy_loss 0.5 and num_gradient_steps 2", v)
	}
	var res TrainResult
	summarise(&res, lines)
	// Means over the finite values only: loss 0.25 (line 2), policy_loss
	// (0.5+0.25)/2, grad_norm 1.
	if res.GradientSteps != 2 || res.Mean["loss"] != 0.25 || res.Mean["policy_loss"] != 0.375 || res.Metrics.GradNorm != 1 {
		t.Fatalf("summarise()=%+v, want 2 steps, loss 0.25, policy_loss 0.375, grad_norm 1", res)
	}
	if want := map[string]int{"loss": 1, "grad_norm": 1, "entropy": 1}; len(res.NonFinite) != 3 || res.NonFinite["loss"] != 1 || res.NonFinite["entropy"] != 1 {
		t.Fatalf("NonFinite=%v, want %v", res.NonFinite, want)
	}
	if got := string(pythonJSON([]byte(`{"a": "Infinity", "b": -Infinity}`))); got != `{"a": "Infinity", "b": "\u0000-Infinity"}` {
		t.Fatalf("pythonJSON()=%s", got)
	}
}

func TestSplitTurns(t *testing.T) {
	sys := json.RawMessage(`{"role":"system","content":"s"}`)
	user := json.RawMessage(`{"role":"user","content":"u"}`)
	tool := json.RawMessage(`{"role":"tool","tool_call_id":"c1","content":"ok"}`)
	c1 := json.RawMessage(`{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"take_fork","arguments":"{}"}}],"reasoning_content":null},"finish_reason":"tool_calls","logprobs":{"content":[{"token":"token_id:1","logprob":-0.5}]}}`)
	c2 := json.RawMessage(`{"index":0,"message":{"role":"assistant","content":"done","tool_calls":[]},"finish_reason":"stop","logprobs":{"content":[{"token":"token_id:2","logprob":-0.1}]}}`)
	m1 := `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"take_fork","arguments":"{}"}}]}`
	tools := json.RawMessage(`[{"type":"function"}]`)

	main, hs, err := splitTurns([]json.RawMessage{sys, user, c1, tool, c2}, tools)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{string(sys), string(user), m1, string(tool), string(c2)}
	if len(main) != len(want) {
		t.Fatalf("main history has %d items, want %d", len(main), len(want))
	}
	for i := range want {
		if string(main[i]) != want[i] {
			t.Errorf("main item %d = %s, want %s", i, main[i], want[i])
		}
	}
	if len(hs) != 1 || len(hs[0].MessagesAndChoices) != 3 || string(hs[0].MessagesAndChoices[2]) != string(c1) || string(hs[0].Tools) != string(tools) {
		t.Fatalf("histories %s, want one: system, user, the first choice, with the tools", mustJSON(t, hs))
	}
	// One sampled turn: nothing to split.
	one := []json.RawMessage{sys, user, c1}
	if main, hs, err := splitTurns(one, nil); err != nil || hs != nil || len(main) != 3 || string(main[2]) != string(c1) {
		t.Fatalf("splitTurns(one turn)=%s, %v, %v; want it unchanged", mustJSON(t, main), hs, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
