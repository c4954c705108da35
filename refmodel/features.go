package refmodel

import "github.com/grpo-dev/grpo/rollout"

// Feature indices. The vector is what the policy sees of a state line; the
// order is part of the adapter format (adapters record NumFeatures).
const (
	fBias          = iota // always 1
	fHoldLeftOnly         // holding the left fork and not the right
	fHoldRightOnly        // holding the right fork and not the left
	fHoldBoth             // holding both forks
	fFreeLeft             // the left fork is held by nobody
	fFreeRight            // the right fork is held by nobody
	fWaitLeft             // holding only the left fork, the right one taken
	fWaitRight            // holding only the right fork, the left one taken
	fOddID                // odd philosopher id
	fLastSeat             // id == n-1
	fFirstRound           // no previous decision
	fProgress             // (round-1)/(rounds-1), in [0, 1]
	fAteBefore            // own meals > 0
	fTableAte             // table meals > 0
	fLastOK               // the previous decision succeeded
	fLastPickUp           // the previous decision was a pick-up
	fLastPutDown          // the previous decision was a put-down
	fLastEat              // the previous decision was eat
	fLastIdle             // the previous decision was think or invalid
	fNoState              // the request carried no parseable state line

	// NumFeatures is the length of a feature vector.
	NumFeatures
)

// Features is the policy's input.
type Features [NumFeatures]float64

// NoStateFeatures is the "no information" input used when a request has no
// state line: only the bias and the no-state indicator are set.
var NoStateFeatures = Features{fBias: 1, fNoState: 1}

// FeaturesOf maps a state line to the policy's input.
func FeaturesOf(s *rollout.State) Features {
	var x Features
	x[fBias] = 1
	hl, hr := s.Holding.Left, s.Holding.Right
	switch {
	case hl && hr:
		x[fHoldBoth] = 1
	case hl:
		x[fHoldLeftOnly] = 1
		if !s.Free.Right {
			x[fWaitLeft] = 1
		}
	case hr:
		x[fHoldRightOnly] = 1
		if !s.Free.Left {
			x[fWaitRight] = 1
		}
	}
	x[fFreeLeft] = flag(s.Free.Left)
	x[fFreeRight] = flag(s.Free.Right)
	x[fOddID] = flag(s.ID%2 == 1)
	x[fLastSeat] = flag(s.N > 0 && s.ID == s.N-1)
	if s.Rounds > 1 {
		x[fProgress] = min(1, max(0, float64(s.Round-1)/float64(s.Rounds-1)))
	}
	x[fAteBefore] = flag(s.Meals > 0)
	x[fTableAte] = flag(s.TableMeals > 0)
	if s.Last == nil {
		x[fFirstRound] = 1
		return x
	}
	x[fLastOK] = flag(s.Last.OK)
	switch s.Last.Action {
	case rollout.PickUpLeft, rollout.PickUpRight:
		x[fLastPickUp] = 1
	case rollout.PutDownLeft, rollout.PutDownRight:
		x[fLastPutDown] = 1
	case rollout.Eat:
		x[fLastEat] = 1
	default:
		x[fLastIdle] = 1
	}
	return x
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
