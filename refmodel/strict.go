package refmodel

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/grpo-dev/grpo/rollout"
)

// Strict makes the inference server behave like vLLM where the difference
// can break or silently spoil a run, so that grpo's handling of it is
// tested against the embedded backend:
//
//   - tool_choice "auto" (also implied when a request lists tools and sets
//     no tool_choice) is refused with vLLM's 400 unless AutoToolChoice says
//     the server was started with --enable-auto-tool-choice
//     --tool-call-parser hermes;
//   - load_inplace is ignored, as by vLLM before the option existed:
//     loading a name again answers 400 "has already been loaded" and keeps
//     the old weights;
//   - a temperature above 0 and below 0.01 is raised to 0.01 (0 stays
//     greedy), as vLLM's sampling parameters do;
//   - a share Quirks of completions comes back in one of the shapes vLLM's
//     hermes parser produces: the raw <tool_call> text in content with no
//     tool_calls (a call it could not parse), several tool calls, or an
//     answer cut by max_tokens with finish_reason "length". Which
//     completions, and which shape, is a pure function of the request's
//     seed (or of the server's seeded sequence), so a run is repeatable.
type Strict struct {
	AutoToolChoice bool
	Quirks         float64 // 0 to 1
}

// minTemperature is vLLM's _MAX_TEMP: positive temperatures below it are
// raised to it.
const minTemperature = 0.01

// autoToolChoiceError is vLLM's message for tool_choice "auto" on a
// server started without tool parsing.
const autoToolChoiceError = `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`

func (s *Strict) validate() error {
	if s != nil && !(s.Quirks >= 0 && s.Quirks <= 1) {
		return fmt.Errorf("refmodel: strict quirks %v: accepted 0 to 1", s.Quirks)
	}
	return nil
}

// checkToolChoice refuses what vLLM refuses without its tool flags.
func (s *Strict) checkToolChoice(req *chatRequest) *requestError {
	if s == nil || s.AutoToolChoice {
		return nil
	}
	var choice string
	if len(req.ToolChoice) == 0 || string(req.ToolChoice) == "null" {
		if len(req.Tools) > 0 {
			choice = "auto"
		}
	} else {
		_ = json.Unmarshal(req.ToolChoice, &choice)
	}
	if choice == "auto" {
		return &requestError{msg: autoToolChoiceError}
	}
	return nil
}

// temperature is t as vLLM samples with it.
func (s *Strict) temperature(t float64) float64 {
	if s != nil && t > 0 && t < minTemperature {
		return minTemperature
	}
	return t
}

// Quirk shapes.
const (
	quirkNone = iota
	quirkUnparsed
	quirkSeveral
	quirkTruncated
)

// quirk picks the completion's shape from u, a uniform draw independent of
// the sampling draw.
func (s *Strict) quirk(u float64) int {
	if s == nil || s.Quirks <= 0 || u >= s.Quirks {
		return quirkNone
	}
	// The draw below Quirks, rescaled, picks one of the three shapes.
	return quirkUnparsed + min(int(math.Floor(3*u/s.Quirks)), 2)
}

// applyQuirk reshapes a tool call choice as vLLM's parser sometimes
// returns it. A text answer is left alone.
func applyQuirk(ch *chatChoice, q int, a int) {
	if q == quirkNone || a == TextOutput {
		return
	}
	name := rollout.ToolNames[a]
	call := `<tool_call>` + "\n" + `{"name": "` + name + `", "arguments": {}}` + "\n" + `</tool_call>`
	switch q {
	case quirkUnparsed:
		// The hermes parser failed: the raw text, no tool_calls.
		text := `<tool_call>` + "\n" + `{"name": "` + name + `", "arguments": {}` + "\n" + `</tool_call>`
		ch.Message.Content, ch.Message.ToolCalls, ch.FinishReason = &text, nil, "stop"
	case quirkSeveral:
		other := rollout.ToolNames[(a+1)%len(rollout.ToolNames)]
		ch.Message.ToolCalls = append(ch.Message.ToolCalls, toolCall{
			ID: "chatcmpl-tool-" + randomHex(), Type: "function", Function: functionCall{Name: other, Arguments: "{}"},
		})
	case quirkTruncated:
		text := call[:len(call)/2]
		ch.Message.Content, ch.Message.ToolCalls, ch.FinishReason = &text, nil, "length"
	}
}
