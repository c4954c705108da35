package rollout

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// ReplayOutputBytes caps the raw model output a Move keeps.
const ReplayOutputBytes = 2048

// Round is what one round (numbered from 1) of an episode did, for a replay: each
// philosopher's move in seat order.
type Round struct {
	Round int    `json:"round"`
	Moves []Move `json:"moves"`
}

// Move is one philosopher's turn of a round: the tool call it made
// (Invalid when none could be read), whether it succeeded, the forks the
// philosopher holds after the round, and its raw output (content and tool
// calls as JSON), cut to ReplayOutputBytes.
type Move struct {
	Action string `json:"action"`
	OK     bool   `json:"ok"`
	Forks  []int  `json:"forks"`
	Output string `json:"output"`
}

// Holding returns the forks philosopher id holds, in fork order.
func (t *Table) Holding(id int) []int {
	out := []int{}
	for f, o := range t.owner {
		if o == id {
			out = append(out, f)
		}
	}
	return out
}

// rawOutput is an answer as the replay shows it: its JSON, capped.
func rawOutput(m *Message, maxAnswer int) string {
	if n := answerBytes(*m); n > maxAnswer {
		return "[answer dropped: over the byte cap]"
	}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Content   string     `json:"content,omitempty"`
		ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	}{m.Content, m.ToolCalls}); err != nil {
		return ""
	}
	return capString(strings.TrimSuffix(b.String(), "\n"), ReplayOutputBytes)
}

// capString cuts s to at most n bytes on a rune boundary, marking a cut.
func capString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// recordRound appends the round's moves to the episode's replay when its
// spec asks for one.
func (e *episode) recordRound(round int, actions []string, ok []bool, outputs []string) {
	if !e.spec.KeepRounds {
		return
	}
	r := Round{Round: round, Moves: make([]Move, len(actions))}
	for i := range actions {
		r.Moves[i] = Move{Action: actions[i], OK: ok[i], Forks: e.table.Holding(i), Output: outputs[i]}
	}
	e.rounds = append(e.rounds, r)
}
