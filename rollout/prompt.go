package rollout

import (
	"fmt"
	"strconv"
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
	b := make([]byte, 0, 512)
	b = append(b, "Round "...)
	b = strconv.AppendInt(b, int64(s.Round), 10)
	b = append(b, " of "...)
	b = strconv.AppendInt(b, int64(s.Rounds), 10)
	b = append(b, ". "...)
	if s.Last != nil {
		if s.Last.Action == Invalid {
			b = append(b, "Your last reply was not a single valid tool call, so nothing happened. "...)
		} else {
			b = append(b, "Your last action "...)
			b = append(b, s.Last.Action...)
			b = append(b, ' ')
			b = append(b, okWord(s.Last.OK)...)
			b = append(b, ". "...)
		}
	}
	b = appendForkSentence(b, "left", s.Holding.Left, s.Free.Left)
	b = appendForkSentence(b, "right", s.Holding.Right, s.Free.Right)
	b = append(b, "You have eaten "...)
	b = strconv.AppendInt(b, int64(s.Meals), 10)
	b = append(b, " meal(s); the table "...)
	b = strconv.AppendInt(b, int64(s.TableMeals), 10)
	b = append(b, ". Choose one tool.\n"...)
	return string(s.appendLine(b))
}

func appendForkSentence(b []byte, side string, holding, free bool) []byte {
	switch {
	case holding:
		return append(append(append(b, "You hold your "...), side...), " fork. "...)
	case free:
		return append(append(append(b, "Your "...), side...), " fork is free. "...)
	default:
		return append(append(append(b, "Your "...), side...), " fork is held by a neighbour. "...)
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
