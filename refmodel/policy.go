package refmodel

import (
	"fmt"
	"math"

	"github.com/grpo-dev/grpo/rollout"
)

// Outputs: the six tools in rollout.ToolNames order, then a plain-text reply
// with no tool call.
const (
	outPickUpLeft = iota
	outPickUpRight
	outPutDownLeft
	outPutDownRight
	outEat
	outThink
	// TextOutput is the index of the plain-text reply, an invalid output.
	TextOutput

	// NumOutputs is the number of outputs the policy scores.
	NumOutputs
)

// OutputName returns the tool name of output i, or "text" for TextOutput.
func OutputName(i int) string {
	if i == TextOutput {
		return "text"
	}
	return rollout.ToolNames[i]
}

// tokenBase is the token id of output 0; output i is token tokenBase+i, and
// the server reports it as "token_id:<tokenBase+i>" (vLLM's
// --return-tokens-as-token-ids form).
const tokenBase = 1000

// TokenID returns the token id that stands for output i.
func TokenID(i int) int { return tokenBase + i }

// OutputOfToken returns the output a token id stands for, or -1.
func OutputOfToken(id int) int {
	if id < tokenBase || id >= tokenBase+NumOutputs {
		return -1
	}
	return id - tokenBase
}

// Mask is a set of outputs the policy may choose, bit i for output i.
type Mask uint8

// AllOutputs allows every output.
const AllOutputs Mask = 1<<NumOutputs - 1

// Has reports whether output i is allowed.
func (m Mask) Has(i int) bool { return m&(1<<i) != 0 }

// baseWeights is W0, the frozen base: a poor coordinator on purpose. With
// nothing in hand a philosopher grabs its left fork; holding it, it keeps
// reaching for the right one whether or not it is free and rarely puts the
// left one down; it eats whenever it holds both and keeps them; it thinks
// now and then and answers in plain text a few percent of the time. The
// features that would let it do better (odd ids, a taken right fork, the
// first round) carry no base weight, so training has something to find.
var baseWeights = [NumOutputs][NumFeatures]float64{
	outPickUpLeft: {
		fBias: 2.4, fFreeLeft: 1.0, fHoldRightOnly: 1.0,
		fHoldLeftOnly: -6, fHoldBoth: -6,
	},
	outPickUpRight: {
		fBias: -1.0, fFreeRight: 0.3,
		fHoldLeftOnly: 5.2, fHoldBoth: -4, fHoldRightOnly: -4,
	},
	outPutDownLeft: {
		fBias: -4, fHoldLeftOnly: 4.6, fHoldBoth: -0.5,
	},
	outPutDownRight: {
		fBias: -4, fHoldRightOnly: 4.6, fHoldBoth: -0.5,
	},
	outEat: {
		fBias: -3.5, fHoldBoth: 7.5, fHoldLeftOnly: 1.5, fAteBefore: 0.5,
	},
	outThink: {
		fBias: 0, fHoldLeftOnly: 0.8, fHoldBoth: -1.0,
	},
	TextOutput: {
		fBias: -0.2, fHoldLeftOnly: 0.3, fHoldBoth: -0.5, fNoState: 1.5,
	},
}

// coordinationDelta is the direction the base-strength knob moves W0 in
// (W0(c) = baseWeights + c * coordinationDelta): towards the two fixes of
// the textbook deadlock, with c > 0, or away from them, with c < 0. A
// philosopher holding one fork while the other is taken puts it down
// instead of reaching for the taken one, and odd ids reach for the right
// fork first. It uses only features the policy already reads; the reward
// is not in it.
var coordinationDelta = [NumOutputs][NumFeatures]float64{
	outPickUpLeft:   {fOddID: -2, fWaitRight: -2},
	outPickUpRight:  {fOddID: 5, fWaitLeft: -2},
	outPutDownLeft:  {fWaitLeft: 4},
	outPutDownRight: {fWaitRight: 4},
}

// The accepted base coordinations (the knob of Options.BaseCoordination
// and trainer.base_coordination): 0 is the default base, baseWeights
// exactly; below 0 coordinates worse, above 0 better.
const (
	DefaultBaseCoordination = 0.0
	MinBaseCoordination     = -1.0
	MaxBaseCoordination     = 1.0
)

// Base is a frozen base W0 at a coordination strength. The inference
// server and the trainer of a backend share one, so the logprobs the server
// reports are those the trainer recomputes.
type Base struct {
	coordination float64
	w            [NumOutputs][NumFeatures]float64
}

var defaultBase = &Base{w: baseWeights}

// DefaultBase is the base at DefaultBaseCoordination: baseWeights.
func DefaultBase() *Base { return defaultBase }

// NewBase returns W0 moved by coordination along coordinationDelta; 0
// gives the default base exactly. coordination must be in
// [MinBaseCoordination, MaxBaseCoordination].
func NewBase(coordination float64) (*Base, error) {
	if !(coordination >= MinBaseCoordination && coordination <= MaxBaseCoordination) {
		return nil, fmt.Errorf("base coordination %v: accepted %v to %v (0: the default base)", coordination, MinBaseCoordination, MaxBaseCoordination)
	}
	if coordination == 0 {
		return defaultBase, nil
	}
	b := &Base{coordination: coordination, w: baseWeights}
	for o := range NumOutputs {
		for f := range NumFeatures {
			b.w[o][f] += coordination * coordinationDelta[o][f]
		}
	}
	return b, nil
}

// Coordination is the knob's value the base was made with.
func (b *Base) Coordination() float64 { return b.coordination }

// Policy returns the policy W0 + (alpha/rank) B A of adapter a on this
// base; a nil adapter gives the base policy. An adapter trained on another
// base is refused: its weights were fitted to that base's W0.
func (b *Base) Policy(a *Adapter) (*Policy, error) {
	if a != nil && a.BaseCoordination != b.coordination {
		return nil, fmt.Errorf("adapter trained on base coordination %v, this base's is %v", a.BaseCoordination, b.coordination)
	}
	return b.policy(a), nil
}

// Policy scores the seven outputs of a state. A Policy is immutable and safe
// for concurrent use.
type Policy struct {
	adapter *Adapter                         // nil for the base
	w       [NumOutputs][NumFeatures]float64 // W0 + scale B A
}

// BasePolicy returns the default base's policy with no adapter.
func BasePolicy() *Policy { return NewPolicy(nil) }

// NewPolicy returns the policy W0 + (alpha/rank) B A of adapter a on the
// default base, whatever base a was trained on; a nil adapter gives the
// base policy.
func NewPolicy(a *Adapter) *Policy { return defaultBase.policy(a) }

func (b *Base) policy(a *Adapter) *Policy {
	p := &Policy{adapter: a, w: b.w}
	if a == nil {
		return p
	}
	s := a.Scale()
	for o := range NumOutputs {
		for r := range a.Rank {
			b := s * a.B[o*a.Rank+r]
			if b == 0 {
				continue
			}
			row := a.A[r*NumFeatures : (r+1)*NumFeatures]
			for f, v := range row {
				p.w[o][f] += b * v
			}
		}
	}
	return p
}

// Adapter returns the policy's adapter, nil for the base.
func (p *Policy) Adapter() *Adapter { return p.adapter }

// Logits returns the raw scores of the outputs for x.
func (p *Policy) Logits(x *Features) [NumOutputs]float64 {
	var z [NumOutputs]float64
	for o := range NumOutputs {
		var s float64
		for f, v := range x {
			if v != 0 {
				s += p.w[o][f] * v
			}
		}
		z[o] = s
	}
	return z
}

// LogProbs returns log softmax(logits/temperature) over the outputs in m;
// outputs outside m get -Inf. A temperature of 0 (greedy) reports the
// temperature-1 distribution, as vLLM does for greedy sampling.
func (p *Policy) LogProbs(x *Features, temperature float64, m Mask) [NumOutputs]float64 {
	z := p.Logits(x)
	return logSoftmax(&z, temperature, m)
}

func logSoftmax(z *[NumOutputs]float64, temperature float64, m Mask) [NumOutputs]float64 {
	t := temperature
	if t <= 0 {
		t = 1
	}
	var out [NumOutputs]float64
	hi := math.Inf(-1)
	for o := range NumOutputs {
		if m.Has(o) {
			hi = max(hi, z[o]/t)
		}
	}
	var sum float64
	for o := range NumOutputs {
		if m.Has(o) {
			sum += math.Exp(z[o]/t - hi)
		}
	}
	lse := hi + math.Log(sum)
	for o := range NumOutputs {
		if m.Has(o) {
			out[o] = z[o]/t - lse
		} else {
			out[o] = math.Inf(-1)
		}
	}
	return out
}

// Pick chooses an output from log-probabilities: the most likely one (the
// lowest index on ties) when temperature is 0, otherwise the one whose
// cumulative probability first exceeds u, a uniform draw in [0, 1).
func Pick(logp *[NumOutputs]float64, temperature, u float64) int {
	best := -1
	if temperature <= 0 {
		for o, l := range logp {
			if !math.IsInf(l, -1) && (best < 0 || l > logp[best]) {
				best = o
			}
		}
		return best
	}
	var c float64
	for o, l := range logp {
		if math.IsInf(l, -1) {
			continue
		}
		best = o
		c += math.Exp(l)
		if u < c {
			return o
		}
	}
	return best // rounding left u above the last cumulative sum
}
