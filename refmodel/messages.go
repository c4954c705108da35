package refmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/grpo-dev/grpo/rollout"
)

// chatMessage is the part of an OpenAI message the policy reads.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// contentPart is one element of an array-valued message content.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// messageText returns a message content's text: a string, the text parts of
// an array of parts joined by newlines, or "" for null or absent content.
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case '[':
		var parts []contentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return "", err
		}
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(p.Text)
			}
		}
		return b.String(), nil
	}
	return "", errors.New("content must be a string, an array of parts or null")
}

// stateFeatures returns the features of an observation text, and false when
// it carries no parseable state line.
func stateFeatures(text string) (Features, bool) {
	s, err := rollout.ParseState(text)
	if err != nil {
		return NoStateFeatures, false
	}
	return FeaturesOf(&s), true
}

// toolMask returns the outputs a request with these tool names may produce:
// the plain-text reply and each of the six tools it lists.
func toolMask(names []string) Mask {
	m := Mask(1) << TextOutput
	for _, n := range names {
		if i := rollout.ToolIndex(n); i >= 0 {
			m |= 1 << i
		}
	}
	return m
}

// toolDef is the part of an OpenAI tool definition the server reads.
type toolDef struct {
	Type     string `json:"type"`
	Function *struct {
		Name string `json:"name"`
	} `json:"function"`
}

// toolNames validates tool definitions and returns their function names.
func toolNames(tools []toolDef) ([]string, error) {
	names := make([]string, len(tools))
	for i, t := range tools {
		if t.Type != "function" || t.Function == nil || t.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: want {\"type\":\"function\",\"function\":{\"name\":...}}", i)
		}
		names[i] = t.Function.Name
	}
	return names, nil
}
