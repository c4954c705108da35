package rollout

import (
	"encoding/json"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// encodeMessage is json.Marshal(m) (go-openai's MarshalJSON), byte for
// byte, without reflection for the messages an episode builds: a role,
// text content, tool calls and a tool call id. Others take json.Marshal.
func encodeMessage(m *openai.ChatCompletionMessage) json.RawMessage {
	if m.MultiContent != nil || m.Refusal != "" || m.Name != "" || m.ReasoningContent != "" || m.FunctionCall != nil {
		return mustJSON(m)
	}
	for _, tc := range m.ToolCalls {
		if tc.Index != nil {
			return mustJSON(m)
		}
	}
	// The size of the encoding, so that it is made in one buffer of about
	// its size: an observation's state line is JSON, whose escaped quotes
	// would otherwise outgrow an estimate, and the grown buffer (twice the
	// message) would be what the conversation keeps.
	n := 32 + escapedLen(m.Role) + escapedLen(m.Content)
	if m.ToolCallID != "" {
		n += 18 + escapedLen(m.ToolCallID)
	}
	if len(m.ToolCalls) > 0 {
		n += 16
	}
	for _, tc := range m.ToolCalls {
		n += 72 + escapedLen(tc.ID) + escapedLen(string(tc.Type)) + escapedLen(tc.Function.Name) + escapedLen(tc.Function.Arguments)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"role":`...)
	b = appendString(b, m.Role)
	if m.Content != "" {
		b = append(b, `,"content":`...)
		b = appendString(b, m.Content)
	}
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '{')
			if tc.ID != "" {
				b = append(b, `"id":`...)
				b = appendString(b, tc.ID)
				b = append(b, ',')
			}
			b = append(b, `"type":`...)
			b = appendString(b, string(tc.Type))
			b = append(b, `,"function":{`...)
			if tc.Function.Name != "" {
				b = append(b, `"name":`...)
				b = appendString(b, tc.Function.Name)
			}
			if tc.Function.Arguments != "" {
				if tc.Function.Name != "" {
					b = append(b, ',')
				}
				b = append(b, `"arguments":`...)
				b = appendString(b, tc.Function.Arguments)
			}
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.ToolCallID != "" {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// plainASCII marks the bytes appendString copies as they are: printable
// ASCII but " \ < > &. (A byte at a time through this table is faster
// than eight at a time by arithmetic: the observations' state lines are
// JSON, whose quotes end every run of plain bytes after a few.)
var plainASCII = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// escapedLen is len(appendString(nil, s)) - 2: s's length as a JSON
// string's contents.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); {
		c := s[i]
		if plainASCII[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\', '\b', '\f', '\n', '\r', '\t':
				n++
			default:
				n += 5 // \u00XX
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			n += 5 // \ufffd for one byte
		case r == '\u2028' || r == '\u2029':
			n += 3 // \u202X for three bytes
		}
		i += size
	}
	return n
}

// appendString appends s as a JSON string exactly as encoding/json writes
// it: HTML characters, U+2028 and U+2029 escaped, invalid UTF-8 replaced.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if plainASCII[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
