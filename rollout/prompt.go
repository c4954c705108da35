package rollout

import (
	"fmt"
	"strings"
)

// SystemPrompt is the rules as one philosopher hears them.
func SystemPrompt(cfg EnvConfig, id int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are philosopher %d at a round table of %d philosophers (ids 0 to %d). ", id, cfg.N, cfg.N-1)
	fmt.Fprintf(&b, "Fork %d is on your left and fork %d on your right; each fork is shared with a neighbour. ", id, (id+1)%cfg.N)
	fmt.Fprintf(&b, "The dinner lasts %d rounds. ", cfg.Rounds)
	if cfg.Mode == Sequential {
		b.WriteString("Each round the philosophers act one at a time in id order, and each action takes effect at once. ")
	} else {
		b.WriteString("Each round all philosophers decide at the same time on the same view of the table; " +
			"put-downs happen first, then eating, then pick-ups (if two neighbours reach for the same free fork, one of them gets it at random). ")
	}
	b.WriteString("Every round you must call exactly one tool: pick_up_left, pick_up_right, put_down_left, put_down_right, eat or think. " +
		"Eating needs both of your forks; you keep them after eating. ")
	fmt.Fprintf(&b, "If every fork is held and nobody holds two, the table is deadlocked and the dinner ends after %d such round(s). ", cfg.DeadlockPatience)
	b.WriteString("Goals, shared by the whole table: never deadlock, eat as many meals as possible in total, and share meals fairly.")
	return b.String()
}

// Observation renders philosopher s.ID's view of a round: prose for a
// language model, then the machine-readable state line.
func Observation(s State) string {
	var b strings.Builder
	b.Grow(320)
	fmt.Fprintf(&b, "Round %d of %d. ", s.Round, s.Rounds)
	if s.Last != nil {
		if s.Last.Action == Invalid {
			b.WriteString("Your last reply was not a single valid tool call, so nothing happened. ")
		} else {
			fmt.Fprintf(&b, "Your last action %s %s. ", s.Last.Action, okWord(s.Last.OK))
		}
	}
	b.WriteString(forkSentence("left", s.Holding.Left, s.Free.Left))
	b.WriteString(forkSentence("right", s.Holding.Right, s.Free.Right))
	fmt.Fprintf(&b, "You have eaten %d meal(s); the table %d. Choose one tool.\n", s.Meals, s.TableMeals)
	b.WriteString(s.Line())
	return b.String()
}

func forkSentence(side string, holding, free bool) string {
	switch {
	case holding:
		return "You hold your " + side + " fork. "
	case free:
		return "Your " + side + " fork is free. "
	default:
		return "Your " + side + " fork is held by a neighbour. "
	}
}

func okWord(ok bool) string {
	if ok {
		return "succeeded"
	}
	return "failed"
}

// ResultText is the tool message that answers a call.
func ResultText(action string, ok bool) string {
	if ok {
		return "ok: " + action + " succeeded"
	}
	return "failed: " + action + " had no effect"
}

// invalidResult answers tool calls of an invalid output.
const invalidResult = "invalid: call exactly one of the six tools with no arguments; nothing happened this round"
