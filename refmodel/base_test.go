package refmodel

import (
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// TestBaseDefaultIsToday: the knob at its default is the base of before
// the knob, bit for bit: the same W0 (every weight compared as bits), the
// same served logits (hand-computed from the table for one state), and
// adapters written without the new key.
func TestBaseDefaultIsToday(t *testing.T) {
	b, err := NewBase(DefaultBaseCoordination)
	if err != nil {
		t.Fatal(err)
	}
	for o := range NumOutputs {
		for f := range NumFeatures {
			if math.Float64bits(b.w[o][f]) != math.Float64bits(baseWeights[o][f]) {
				t.Fatalf("W0[%s][%d] = %v, want %v", OutputName(o), f, b.w[o][f], baseWeights[o][f])
			}
		}
	}
	p, err := b.Policy(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Round 1, nothing held, both forks free, id 2 of 5: bias, free left,
	// free right, first round are set; from the table above baseWeights:
	// pick_up_left 2.4+1.0, pick_up_right -1.0+0.3, put_down_* -4,
	// eat -3.5, think 0, text -0.2.
	x := FeaturesOf(&stateFirstRound)
	want := [NumOutputs]float64{3.4, -0.7, -4, -4, -3.5, 0, -0.2}
	if got := p.Logits(&x); got != want {
		t.Fatalf("logits %v, want %v", got, want)
	}
	if got := BasePolicy().Logits(&x); got != want {
		t.Fatalf("BasePolicy logits %v, want %v", got, want)
	}
	a, _ := NewAdapter(2, 4, 1)
	dir := filepath.Join(t.TempDir(), "a")
	if err := a.Save(dir); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ConfigFile))
	if strings.Contains(string(raw), "base_coordination") {
		t.Fatalf("a default-base adapter names its base: %s", raw)
	}
}

func TestNewBaseRange(t *testing.T) {
	for _, c := range []float64{-1.0001, 1.0001, math.NaN(), math.Inf(1)} {
		if _, err := NewBase(c); err == nil || !strings.Contains(err.Error(), "base coordination") {
			t.Errorf("NewBase(%v): %v, want an error naming the base coordination", c, err)
		}
	}
	if _, err := New(Options{DataDir: t.TempDir(), BaseCoordination: 2}); err == nil || !strings.Contains(err.Error(), "base coordination 2: accepted -1 to 1") {
		t.Errorf("New with BaseCoordination 2: %v", err)
	}
	for _, c := range []float64{-1, -0.5, 0.5, 1} {
		b, err := NewBase(c)
		if err != nil || b.Coordination() != c {
			t.Errorf("NewBase(%v): %v, %v", c, b, err)
		}
	}
}

// TestBaseWeightsMove: W0(c) = baseWeights + c*delta, checked on the
// weights the knob moves at c = 0.5 by hand: put_down_left on a taken
// right fork gains 0.5*4, pick_up_right on an odd id 0.5*5.
func TestBaseWeightsMove(t *testing.T) {
	b, _ := NewBase(0.5)
	if got := b.w[outPutDownLeft][fWaitLeft]; got != 2 {
		t.Errorf("put_down_left on wait-left %v, want 2", got)
	}
	if got := b.w[outPickUpRight][fOddID]; got != 2.5 {
		t.Errorf("pick_up_right on odd id %v, want 2.5", got)
	}
	if got := b.w[outPickUpRight][fHoldLeftOnly]; got != 5.2 {
		t.Errorf("pick_up_right on hold-left %v, want 5.2 (unmoved)", got)
	}
}

// TestBaseCoordinationMonotone plays the base at five strengths on the
// same 2000 tables at n = 5 (the rollout package's table, sampling at
// temperature 1): the deadlock rate falls as the knob rises, and the
// ends are far apart.
func TestBaseCoordinationMonotone(t *testing.T) {
	const episodes = 2000
	prev := math.Inf(1)
	var rates []float64
	for _, c := range []float64{-1, -0.5, 0, 0.5, 1} {
		b, _ := NewBase(c)
		p, _ := b.Policy(nil)
		rng := rand.New(rand.NewPCG(11, 1))
		env := rollout.DefaultEnvConfig()
		var dl float64
		for e := range episodes {
			env.Seed = 3_000_000 + int64(e)
			m, _, _ := simEpisode(t, p, env, rng)
			if m.Deadlocked {
				dl++
			}
		}
		dl /= episodes
		rates = append(rates, dl)
		if !(dl < prev) {
			t.Errorf("base coordination %v: deadlock rate %.3f, not below %.3f at the weaker base", c, dl, prev)
		}
		prev = dl
	}
	if rates[0]-rates[len(rates)-1] < 0.5 {
		t.Errorf("deadlock rates %v: the knob barely moves the base", rates)
	}
	t.Logf("deadlock rate at -1, -0.5, 0, 0.5, 1: %v", rates)
}

// trajectoryAt is a one-decision trajectory of output a in state s logged
// with logprob lp.
func trajectoryAt(s rollout.State, a int, lp, adv float64) trainer.Trajectory {
	tr := oneTurn(s, a, adv)
	tr.MessagesAndChoices[2] = choiceItem(tokenStrings[a], lp)
	return tr
}

// TestServerAndTrainerShareBase: at a non-default base the logprob the
// server reports is the one the trainer recomputes for W0: a job on that
// on-policy sample with a negligible learning rate sees ratio 1 at every
// step (loss exactly -A, no clipping, KL 0). A sample logged with the
// default base's logprob is off-policy for this trainer (the loss moves
// away from -A), which is what a trainer on the wrong W0 would see.
func TestServerAndTrainerShareBase(t *testing.T) {
	const c = 0.5
	b, err := New(Options{DataDir: t.TempDir(), Seed: 1, BaseCoordination: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	hs := httptest.NewServer(b.Handler())
	defer hs.Close()
	srv := hs.URL
	served := servedLogProb(t, srv, BaseModelName, stateWaitingRight, outPutDownLeft)
	def := policyLogProbs(BasePolicy(), stateWaitingRight, 1, AllOutputs)[outPutDownLeft]
	if math.Abs(served-def) < 0.5 {
		t.Fatalf("served logprob %v at base coordination %v is the default base's %v", served, c, def)
	}
	for _, tc := range []struct {
		id       string
		lp       float64
		onPolicy bool
	}{{"on", served, true}, {"off", def, false}} {
		req := jobRequest(tc.id, tc.id, nil, trajectoryAt(stateWaitingRight, outPutDownLeft, tc.lp, 1))
		req.Hyperparameters.LearningRate = 1e-12
		createJob(t, srv, req)
		j := waitJob(t, srv, tc.id)
		if j.State != trainer.StateSucceeded {
			t.Fatalf("job %s: %+v", tc.id, j)
		}
		exact := math.Abs(j.Metrics.Loss-(-1)) < 1e-9 && j.Metrics.ClipFraction == 0
		if exact != tc.onPolicy {
			t.Fatalf("job %s: metrics %+v; on-policy %v", tc.id, j.Metrics, tc.onPolicy)
		}
		if j.Metrics.KL > 1e-12 {
			t.Fatalf("job %s: KL %v to the base with B = 0", tc.id, j.Metrics.KL)
		}
	}
	// A trained step: the adapter records its base, is served by this
	// server with the logprob the trainer computes for it, and is refused
	// by a server on another base.
	req := jobRequest("step-1", "step-1", nil, trajectoryAt(stateWaitingRight, outPutDownLeft, served, 1))
	createJob(t, srv, req)
	j := waitJob(t, srv, "step-1")
	if j.State != trainer.StateSucceeded {
		t.Fatalf("job step-1: %+v", j)
	}
	ad, err := LoadAdapter(j.Adapter.Path)
	if err != nil || ad.BaseCoordination != c {
		t.Fatalf("adapter base coordination %v, %v; want %v", ad.BaseCoordination, err, c)
	}
	loadServed(t, srv, j.Adapter)
	base, _ := NewBase(c)
	pol, _ := base.Policy(ad)
	want := policyLogProbs(pol, stateWaitingRight, 1, AllOutputs)[outPutDownLeft]
	if got := servedLogProb(t, srv, "step-1", stateWaitingRight, outPutDownLeft); math.Abs(got-want) > 1e-9 || !(got > served) {
		t.Fatalf("served logprob of the trained adapter %v, trainer's %v, base's %v", got, want, served)
	}
	ob, other := mustServe(t, 1) // the default base
	code, body := do(t, http.MethodPost, other.URL+"/v1/load_lora_adapter", map[string]string{"lora_name": "step-1", "lora_path": j.Adapter.Path})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "base coordination 0.5") {
		t.Fatalf("load into the default base: %d %s", code, body)
	}
	// A chained job on a server with another base refuses the parent
	// (copied into that server's adapter directory, where parents are
	// read from).
	copied := &trainer.Adapter{Name: j.Adapter.Name, Path: ob.AdapterDir(j.Adapter.Name)}
	if err := os.CopyFS(copied.Path, os.DirFS(j.Adapter.Path)); err != nil {
		t.Fatal(err)
	}
	code, j2 := createJob(t, other.URL, jobRequest("step-2", "step-2", copied, oneTurn(stateWaitingRight, outPutDownLeft, 1)))
	if code != http.StatusAccepted {
		t.Fatalf("create step-2: %d", code)
	}
	if j2 = waitJob(t, other.URL, "step-2"); j2.State != trainer.StateFailed || !strings.Contains(j2.Error, "base coordination 0.5") {
		t.Fatalf("chained job on another base: %+v", j2)
	}
}

// TestLoadStoredRefusesOtherBase: a data directory trained at one base is
// not served by a server started with another.
func TestLoadStoredRefusesOtherBase(t *testing.T) {
	dir := t.TempDir()
	a, _ := NewAdapter(2, 4, 1)
	a.BaseCoordination = -0.7
	if err := a.Save(filepath.Join(dir, "adapters", "r-step-0001")); err != nil {
		t.Fatal(err)
	}
	b := mustOpen(t, dir, 1)
	if _, err := b.LoadStored(); err == nil || !strings.Contains(err.Error(), "--base-coordination -0.7") {
		t.Fatalf("LoadStored on the default base: %v", err)
	}
	b2, err := New(Options{DataDir: dir, Seed: 1, BaseCoordination: -0.7})
	if err != nil {
		t.Fatal(err)
	}
	if names, err := b2.LoadStored(); err != nil || len(names) != 1 {
		t.Fatalf("LoadStored on its base: %v, %v", names, err)
	}
}
