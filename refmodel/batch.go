package refmodel

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/grpo-dev/grpo/trainer"
)

// TrajectoryError reports a malformed trajectory of a job: its index in the
// request and, when the fault is in one element, that element's index in
// messages_and_choices (-1 otherwise).
type TrajectoryError struct {
	Index int
	Item  int
	Err   error
}

func (e *TrajectoryError) Error() string {
	if e.Item < 0 {
		return fmt.Sprintf("trajectory %d: %v", e.Index, e.Err)
	}
	return fmt.Sprintf("trajectory %d, messages_and_choices[%d]: %v", e.Index, e.Item, e.Err)
}

func (e *TrajectoryError) Unwrap() error { return e.Err }

var _ error = (*TrajectoryError)(nil)

// trajectoryItem is an element of messages_and_choices: a message (it has a
// role) or a sampled choice (it has a message and logprobs).
type trajectoryItem struct {
	Role     *string         `json:"role"`
	Content  json.RawMessage `json:"content"`
	Message  json.RawMessage `json:"message"`
	TokenIDs []int           `json:"token_ids"`
	Logprobs *struct {
		Content []struct {
			Token   string   `json:"token"`
			Logprob *float64 `json:"logprob"`
		} `json:"content"`
	} `json:"logprobs"`
}

// SamplesOf turns a job's trajectories into training samples: one per
// sampled choice, in the state of the user message before it, with the
// output identified by its logprobs token ("token_id:<n>") and the
// trajectory's advantage. The outputs allowed are the plain-text reply and
// the trajectory's tools (all six when it lists none), as a request with
// tool_choice "auto" allows them.
func SamplesOf(trajs []trainer.Trajectory) ([]Sample, error) {
	var (
		out      []Sample
		lastTool json.RawMessage
		lastMask Mask
	)
	for i := range trajs {
		t := &trajs[i]
		if math.IsNaN(t.Advantage) || math.IsInf(t.Advantage, 0) {
			return nil, &TrajectoryError{Index: i, Item: -1, Err: errors.New("advantage is not a finite number")}
		}
		mask := AllOutputs
		if len(t.Tools) > 0 && string(t.Tools) != "null" {
			if bytes.Equal(t.Tools, lastTool) {
				mask = lastMask
			} else {
				var defs []toolDef
				if err := json.Unmarshal(t.Tools, &defs); err != nil {
					return nil, &TrajectoryError{Index: i, Item: -1, Err: fmt.Errorf("tools: %w", err)}
				}
				names, err := toolNames(defs)
				if err != nil {
					return nil, &TrajectoryError{Index: i, Item: -1, Err: err}
				}
				if len(names) > 0 {
					mask = toolMask(names)
				}
				lastTool, lastMask = t.Tools, mask
			}
		}
		n, err := trajectorySamples(t, mask, &out)
		if err != nil {
			return nil, &TrajectoryError{Index: i, Item: n, Err: err}
		}
		if n == 0 {
			return nil, &TrajectoryError{Index: i, Item: -1, Err: errors.New("no sampled choices")}
		}
	}
	return out, nil
}

// trajectorySamples appends t's samples to out and returns how many there
// were, or the failing item's index and the error.
func trajectorySamples(t *trainer.Trajectory, mask Mask, out *[]Sample) (int, error) {
	var (
		x       Features
		haveX   bool
		sawUser bool
		count   int
	)
	for j, raw := range t.MessagesAndChoices {
		var it trajectoryItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return j, err
		}
		switch {
		case it.Role != nil:
			if *it.Role != "user" {
				continue
			}
			text, err := messageText(it.Content)
			if err != nil {
				return j, err
			}
			sawUser = true
			x, haveX = stateFeatures(text)
		case it.Message != nil || it.Logprobs != nil:
			if !haveX {
				if sawUser {
					return j, errors.New("the user message before this choice has no state line")
				}
				return j, errors.New("choice has no user message with a state line before it")
			}
			a, lp, err := choiceOutput(&it)
			if err != nil {
				return j, err
			}
			if !mask.Has(a) {
				return j, fmt.Errorf("output %s is not among the trajectory's tools", OutputName(a))
			}
			*out = append(*out, Sample{X: x, Mask: mask, Action: a, OldLogProb: lp, Advantage: t.Advantage})
			count++
		default:
			return j, errors.New("neither a message (no \"role\") nor a choice (no \"message\")")
		}
	}
	return count, nil
}

// choiceOutput reads the sampled output and its logprob from a choice.
func choiceOutput(it *trajectoryItem) (int, float64, error) {
	if it.Logprobs == nil {
		return 0, 0, errors.New("choice has no logprobs (the request must set \"logprobs\": true)")
	}
	c := it.Logprobs.Content
	if len(c) != 1 {
		return 0, 0, fmt.Errorf("choice has %d logprobs tokens, want the 1 the reference policy samples", len(c))
	}
	tok := c[0].Token
	num, ok := strings.CutPrefix(tok, "token_id:")
	id, err := strconv.Atoi(num)
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("logprobs token %q is not of the form token_id:<n>", tok)
	}
	if it.TokenIDs != nil && (len(it.TokenIDs) != 1 || it.TokenIDs[0] != id) {
		return 0, 0, fmt.Errorf("token_ids %v do not match the logprobs token %q", it.TokenIDs, tok)
	}
	a := OutputOfToken(id)
	if a < 0 {
		return 0, 0, fmt.Errorf("logprobs token %q is not one of the policy's tokens (token_id:%d to token_id:%d)",
			tok, TokenID(0), TokenID(NumOutputs-1))
	}
	lp := c[0].Logprob
	if lp == nil || math.IsNaN(*lp) || *lp > 1e-9 || math.IsInf(*lp, 0) {
		return 0, 0, fmt.Errorf("logprob of %q is missing or not a finite number <= 0", tok)
	}
	return a, min(*lp, 0), nil
}
