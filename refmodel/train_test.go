package refmodel

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
)

func baseLogProb(t *testing.T, s rollout.State, o int) float64 {
	t.Helper()
	x := FeaturesOf(&s)
	lp := BasePolicy().LogProbs(&x, 1, AllOutputs)
	return lp[o]
}

// TestLossHandComputed checks the PPO-clip loss on cases worked by hand.
// With B = 0 the policy is the base.
func TestLossHandComputed(t *testing.T) {
	ad, err := NewAdapter(4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	x := FeaturesOf(&stateFirstRound)
	left := baseLogProb(t, stateFirstRound, outPickUpLeft)
	think := baseLogProb(t, stateFirstRound, outThink)
	cfg := TrainConfig{}.withDefaults()
	gA, gB := make([]float64, len(ad.A)), make([]float64, len(ad.B))

	// Ratio 1: loss = mean(-A) = mean(-1, +3) = 1.
	onPolicy := []Sample{
		{X: x, Mask: AllOutputs, Action: outPickUpLeft, OldLogProb: left, Advantage: 1},
		{X: x, Mask: AllOutputs, Action: outPickUpLeft, OldLogProb: left, Advantage: -3},
	}
	st := newObjective(onPolicy, cfg).lossGrad(ad, gA, gB)
	if math.Abs(st.Loss-1) > 1e-12 || st.ClipFraction != 0 || st.KL != 0 {
		t.Fatalf("on-policy stats = %+v, want loss 1, no clipping, KL 0", st)
	}

	// Ratio 2 with A = +1 clips to 1.2: -1.2. Ratio 0.5 with A = -1 clips
	// to 0.8: +0.8. Mean -0.2, everything clipped, so no gradient.
	clipped := []Sample{
		{X: x, Mask: AllOutputs, Action: outPickUpLeft, OldLogProb: left - math.Ln2, Advantage: 1},
		{X: x, Mask: AllOutputs, Action: outThink, OldLogProb: think + math.Ln2, Advantage: -1},
	}
	st = newObjective(clipped, cfg).lossGrad(ad, gA, gB)
	if math.Abs(st.Loss-(-0.2)) > 1e-12 || st.ClipFraction != 1 {
		t.Fatalf("clipped stats = %+v, want loss -0.2, clip fraction 1", st)
	}
	for i, g := range append(slices.Clone(gA), gB...) {
		if g != 0 {
			t.Fatalf("gradient[%d] = %v with every sample clipped, want 0", i, g)
		}
	}
}

// TestGradientFiniteDifferences checks dL/dA and dL/dB of the PPO-clip + KL
// loss against central differences.
func TestGradientFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ad, err := NewAdapter(3, 6, 9)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ad.B {
		ad.B[i] = rng.NormFloat64() * 0.5
	}
	states := []rollout.State{stateFirstRound, stateWaitingRight,
		{Round: 4, Rounds: 5, ID: 4, N: 5, Holding: rollout.Sides{Left: true, Right: true}, Meals: 1, TableMeals: 2,
			Last: &rollout.LastEvent{Action: rollout.Eat, OK: true}},
		{Round: 3, Rounds: 5, ID: 3, N: 5, Free: rollout.Sides{Right: true},
			Last: &rollout.LastEvent{Action: rollout.Think, OK: true}}}
	masks := []Mask{AllOutputs, AllOutputs &^ (1 << TextOutput), 1<<outThink | 1<<outEat | 1<<TextOutput}
	pol := NewPolicy(ad)
	var samples []Sample
	for i := range 40 {
		s := states[i%len(states)]
		x := FeaturesOf(&s)
		m := masks[i%len(masks)]
		lp := pol.LogProbs(&x, 1, m)
		a := Pick(&lp, 1, rng.Float64())
		// Old log-probabilities spread the ratios over both sides of the
		// clip range, away from its edges where the loss has kinks.
		shift := []float64{-0.6, -0.1, 0.05, 0.4}[i%4]
		adv := []float64{1.3, -0.7, -1.1, 0.9, 0.2}[i%5]
		samples = append(samples, Sample{X: x, Mask: m, Action: a, OldLogProb: lp[a] + shift, Advantage: adv})
	}
	cfg := TrainConfig{KLBeta: 0.5}.withDefaults()
	o := newObjective(samples, cfg)
	gA, gB := make([]float64, len(ad.A)), make([]float64, len(ad.B))
	st := o.lossGrad(ad, gA, gB)
	if st.ClipFraction == 0 || st.ClipFraction == 1 {
		t.Fatalf("clip fraction %v: the test needs clipped and unclipped samples", st.ClipFraction)
	}
	if st.KL <= 0 {
		t.Fatalf("KL %v: the test needs a policy away from the base", st.KL)
	}
	loss := func() float64 {
		return o.lossGrad(ad, make([]float64, len(ad.A)), make([]float64, len(ad.B))).Loss
	}
	const h = 1e-6
	check := func(name string, w, g []float64) {
		for i := range w {
			orig := w[i]
			w[i] = orig + h
			up := loss()
			w[i] = orig - h
			down := loss()
			w[i] = orig
			num := (up - down) / (2 * h)
			if math.Abs(num-g[i]) > 1e-7+1e-5*math.Abs(g[i]) {
				t.Errorf("d loss/d %s[%d]: analytic %.10g, numeric %.10g", name, i, g[i], num)
			}
		}
	}
	check("A", ad.A, gA)
	check("B", ad.B, gB)
}

// TestTrainMovesProbability: a positive advantage on an output in a state
// raises its probability there; a negative one lowers it.
func TestTrainMovesProbability(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action int
		adv    float64
	}{
		{"positive", outPutDownLeft, 1},
		{"negative", outPickUpRight, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad, err := NewAdapter(8, 16, 5)
			if err != nil {
				t.Fatal(err)
			}
			x := FeaturesOf(&stateWaitingRight)
			before := BasePolicy().LogProbs(&x, 1, AllOutputs)[tc.action]
			samples := []Sample{{X: x, Mask: AllOutputs, Action: tc.action, OldLogProb: before, Advantage: tc.adv}}
			out, st, err := Train(context.Background(), ad, samples, TrainConfig{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			after := NewPolicy(out).LogProbs(&x, 1, AllOutputs)[tc.action]
			if (after-before)*tc.adv <= 0 {
				t.Fatalf("logprob %.4f -> %.4f with advantage %v", before, after, tc.adv)
			}
			if st.GradNorm == 0 {
				t.Fatalf("stats %+v: zero gradient", st)
			}
			if !slices.Equal(ad.B, make([]float64, len(ad.B))) {
				t.Fatal("Train modified its input adapter")
			}
		})
	}
}

func TestTrainDeterministic(t *testing.T) {
	ad, _ := NewAdapter(8, 16, 5)
	rng := rand.New(rand.NewPCG(1, 1))
	var samples []Sample
	for range 50 {
		x := FeaturesOf(&stateFirstRound)
		lp := BasePolicy().LogProbs(&x, 1, AllOutputs)
		a := Pick(&lp, 1, rng.Float64())
		samples = append(samples, Sample{X: x, Mask: AllOutputs, Action: a, OldLogProb: lp[a], Advantage: rng.NormFloat64()})
	}
	a1, s1, err := Train(context.Background(), ad, samples, TrainConfig{Epochs: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a2, s2, _ := Train(context.Background(), ad, samples, TrainConfig{Epochs: 2}, nil)
	if !slices.Equal(a1.A, a2.A) || !slices.Equal(a1.B, a2.B) || s1 != s2 {
		t.Fatal("two identical updates differ")
	}
}

func TestTrainConfigValidation(t *testing.T) {
	for _, c := range []TrainConfig{
		{LearningRate: -1}, {Epsilon: 1.5}, {EpsilonHigh: -0.1}, {KLBeta: -1}, {Epochs: -2},
	} {
		if _, _, err := Train(context.Background(), &Adapter{Rank: 1, Alpha: 1}, nil, c, nil); err == nil {
			t.Errorf("Train with %+v: no error", c)
		}
	}
}

func TestTrainCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ad, _ := NewAdapter(2, 4, 1)
	x := FeaturesOf(&stateFirstRound)
	_, _, err := Train(ctx, ad, []Sample{{X: x, Mask: AllOutputs, Advantage: 1}}, TrainConfig{}, nil)
	if err != context.Canceled {
		t.Fatalf("Train on a cancelled context: %v, want context.Canceled", err)
	}
}

// TestTrainDiagnostics checks the sampler logprob gap, entropy and update
// norm on cases worked by hand.
func TestTrainDiagnostics(t *testing.T) {
	ad, err := NewAdapter(4, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Zero features: every logit is 0, so over four allowed outputs the
	// policy is uniform (logp -ln 4, entropy ln 4), and no gradient
	// reaches A or B (h = A x = 0, and dL/dA carries x).
	four := Mask(0b1111)
	var x Features
	samples := []Sample{
		{X: x, Mask: four, Action: 0, OldLogProb: -math.Log(4) + 0.1, Advantage: 1},
		{X: x, Mask: four, Action: 2, OldLogProb: -math.Log(4) - 0.3, Advantage: -1},
	}
	_, st, err := Train(context.Background(), ad, samples, TrainConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.SamplerLogprobGap-0.2) > 1e-12 || math.Abs(st.Entropy-math.Log(4)) > 1e-12 || st.UpdateNorm != 0 || st.Samples != 2 {
		t.Fatalf("stats %+v, want gap (0.1+0.3)/2 = 0.2, entropy ln 4 = %.6f, update norm 0, 2 samples", st, math.Log(4))
	}

	// One unclipped gradient step moves the weights by learning rate ×
	// gradient, so the update's norm is learning rate × gradient norm.
	xs := FeaturesOf(&stateWaitingRight)
	before := BasePolicy().LogProbs(&xs, 1, AllOutputs)[outPutDownLeft]
	one := []Sample{{X: xs, Mask: AllOutputs, Action: outPutDownLeft, OldLogProb: before, Advantage: 1}}
	_, st, err = Train(context.Background(), ad, one, TrainConfig{LearningRate: 0.5, Steps: 1, MaxGradNorm: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.GradNorm == 0 || math.Abs(st.UpdateNorm-0.5*st.GradNorm) > 1e-12 {
		t.Fatalf("stats %+v: update norm %v, want 0.5 × grad norm %v", st, st.UpdateNorm, st.GradNorm)
	}
	if st.SamplerLogprobGap != 0 {
		t.Fatalf("on-policy sample: gap %v, want 0", st.SamplerLogprobGap)
	}
}
