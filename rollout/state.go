package rollout

import (
	"encoding/json"
	"errors"
	"strings"
)

// StatePrefix starts the last line of every observation.
const StatePrefix = "state: "

// State is the machine-readable summary that ends each observation as one
// line "state: {JSON}" (DESIGN §2). Other programs read it: keep it stable.
type State struct {
	Round      int        `json:"round"`
	Rounds     int        `json:"rounds"`
	ID         int        `json:"id"`
	N          int        `json:"n"`
	Holding    Sides      `json:"holding"`
	Free       Sides      `json:"free"`
	Meals      int        `json:"meals"`
	TableMeals int        `json:"table_meals"`
	Last       *LastEvent `json:"last"` // shared between tables: read, never change
}

// Sides describes the philosopher's left and right forks.
type Sides struct {
	Left  bool `json:"left"`
	Right bool `json:"right"`
}

// LastEvent is the philosopher's previous decision: a tool name or
// "invalid", and whether it succeeded.
type LastEvent struct {
	Action string `json:"action"`
	OK     bool   `json:"ok"`
}

// ErrNoState is returned by ParseState when the text has no state line.
var ErrNoState = errors.New("observation has no state line")

// ParseState finds the last "state: {JSON}" line in an observation.
func ParseState(observation string) (State, error) {
	var s State
	i := strings.LastIndex(observation, StatePrefix)
	if i < 0 || (i > 0 && observation[i-1] != '\n') {
		return s, ErrNoState
	}
	line := observation[i+len(StatePrefix):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	if err := json.Unmarshal([]byte(line), &s); err != nil {
		return s, err
	}
	return s, nil
}

// Line renders the state as its observation line, without a newline: the
// prefix, then the state as json.Marshal writes it.
func (s State) Line() string {
	return string(s.appendLine(make([]byte, 0, 192)))
}

// appendLine appends the line to b.
func (s State) appendLine(b []byte) []byte {
	js, err := json.Marshal(s)
	if err != nil {
		panic(err) // ints, bools and a string always encode
	}
	return append(append(b, StatePrefix...), js...)
}
