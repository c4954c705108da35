package rollout

import (
	"encoding/json"
	"errors"
	"strconv"
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
// prefix, then the state as json.Marshal writes it (written here without
// reflection: one line per philosopher per round).
func (s State) Line() string {
	return string(s.appendLine(make([]byte, 0, 192)))
}

// appendLine appends the line to b.
func (s State) appendLine(b []byte) []byte {
	b = append(b, StatePrefix+`{"round":`...)
	b = strconv.AppendInt(b, int64(s.Round), 10)
	b = append(b, `,"rounds":`...)
	b = strconv.AppendInt(b, int64(s.Rounds), 10)
	b = append(b, `,"id":`...)
	b = strconv.AppendInt(b, int64(s.ID), 10)
	b = append(b, `,"n":`...)
	b = strconv.AppendInt(b, int64(s.N), 10)
	b = append(b, `,"holding":`...)
	b = s.Holding.append(b)
	b = append(b, `,"free":`...)
	b = s.Free.append(b)
	b = append(b, `,"meals":`...)
	b = strconv.AppendInt(b, int64(s.Meals), 10)
	b = append(b, `,"table_meals":`...)
	b = strconv.AppendInt(b, int64(s.TableMeals), 10)
	b = append(b, `,"last":`...)
	if s.Last == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"action":`...)
		b = appendString(b, s.Last.Action)
		b = append(b, `,"ok":`...)
		b = strconv.AppendBool(b, s.Last.OK)
		b = append(b, '}')
	}
	return append(b, '}')
}

func (d Sides) append(b []byte) []byte {
	b = append(b, `{"left":`...)
	b = strconv.AppendBool(b, d.Left)
	b = append(b, `,"right":`...)
	b = strconv.AppendBool(b, d.Right)
	return append(b, '}')
}
