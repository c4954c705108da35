package rollout

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestValidArgumentsAsUnmarshal: the argument check accepts exactly what
// decoding into a map of raw values accepts.
func TestValidArgumentsAsUnmarshal(t *testing.T) {
	for _, a := range []string{
		"", " ", "{}", " {}\n", `{"a":1}`, `{"a":{"b":[1,2]}}`, `{"a":}`, `{"a":1,}`,
		"[]", "null", `"x"`, "{} {}", `{"a":1}x`, "{", "}", `{"a":"` + "\xff" + `"}`,
		`{"a":1,"a":2}`, "{\t}", `{"\u0000":0}`, `{"a" 1}`,
	} {
		var v map[string]json.RawMessage
		trimmed := strings.TrimSpace(a)
		want := trimmed == "" || trimmed[0] == '{' && json.Unmarshal([]byte(trimmed), &v) == nil
		if got := validArguments(a); got != want {
			t.Errorf("validArguments(%q) = %v, want %v", a, got, want)
		}
	}
}
