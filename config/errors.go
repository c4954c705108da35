package config

import (
	"fmt"
	"strings"
)

// Error is a bad key or value in a configuration. Parse returns it with the
// position in the file; Validate returns it with the key only.
type Error struct {
	File   string // the file read, "" when parsed from bytes
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Key    string // key path, e.g. "grpo.advantage.std" or "inference.endpoints[1].url"; "" for the whole document
	Msg    string // what is wrong and what is accepted
}

// Error formats as "file:line:col: key: msg", dropping the parts that are
// unknown.
var _ error = (*Error)(nil)

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0 && e.Column > 0:
		fmt.Fprintf(&b, "line %d, column %d: ", e.Line, e.Column)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// invalid returns a validation error for key.
func invalid(key, format string, args ...any) *Error {
	return &Error{Key: key, Msg: fmt.Sprintf(format, args...)}
}
