package jsonvalid

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"github.com/grpo-dev/grpo/internal/wordtest"
	"strings"
	"testing"
)

var cases = []string{
	``, ` `, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e5`, `1E+5`, `1e`, `1e-`, `.5`, `+1`, `-1.5e-10`,
	`"x"`, `"\u00e9\n\"\\\/\b\f\r\t"`, `"\x"`, `"\u00g0"`, `"\u00"`, "\"a\x01\"", "\"\xff\xfe\"", `"unterminated`, `"\`,
	`true`, `false`, `null`, `nul`, `truex`, `True`,
	`{}`, `[]`, ` { } `, `[ ]`, `{"a":1}`, `{"a" : [1, 2, {"b": null}]}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,}`,
	`{"a"}`, `{"a":}`, `{1:2}`, `{"a":1 "b":2}`, `[1 2]`, `[1,2]]`, `{"a":1}}`, `{`, `[`, `]`, `}`,
	`[0,1.`, `[0,1.]`, `[0,1e]`, `[1,2.5,3e2,-0,0,-1.5E+3]`, `[1,01]`, `[1,-]`, `[1,2,]`, `[1,2 ,3]`, `[1,2,3`, `[12345678901234567,1]`,
	`[{"a":[{}]},[],{"b":[[]]}]`, `{} {}`, `1 2`, "\t\n\r 1 \t\n\r", "\v1", `[1]x`, `{"a":{"b":{"c":[1,"x",true]}}}`,
}

func TestValidAsEncodingJSON(t *testing.T) {
	for _, c := range cases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
}

// TestValidDepth: 10,000 levels of nesting are valid, 10,001 are not,
// whether the innermost container is empty or not.
func TestValidDepth(t *testing.T) {
	for _, tt := range []struct {
		depth int
		inner string
		want  bool
	}{{10000, "", true}, {10001, "", false}, {10000, "1", true}, {10001, "1", false}, {9999, "{}", true}, {10000, "{}", false}} {
		b := []byte(strings.Repeat("[", tt.depth) + tt.inner + strings.Repeat("]", tt.depth))
		if got := Valid(b); got != tt.want || json.Valid(b) != tt.want {
			t.Errorf("depth %d around %q: Valid %v, encoding/json %v, want %v", tt.depth, tt.inner, got, json.Valid(b), tt.want)
		}
	}
}

func FuzzValidMatchesEncodingJSON(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
		if s := bytes.TrimSpace(b); json.Valid(s) && s[0] == '"' {
			if end := StringEnd(s, 0); end != len(s) {
				t.Fatalf("StringEnd(%q, 0) = %d, want %d", s, end, len(s))
			}
		}
	})
}

func BenchmarkValid(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"eat","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:151657","logprob":-0.1,"bytes":[60],"top_logprobs":[]},{"token":"token_id:5","logprob":-0.2,"bytes":[116],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[151657,5,151658]}],"usage":{"prompt_tokens":700,"completion_tokens":3,"total_tokens":703},"prompt_token_ids":[1,2,3,4,5,6,7,8]}`)
	for _, impl := range []struct {
		name  string
		valid func([]byte) bool
	}{{"jsonvalid", Valid}, {"encoding-json", json.Valid}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			for b.Loop() {
				if !impl.valid(answer) {
					b.Fatal("invalid")
				}
			}
		})
	}
}

// TestLeadingDigits and TestPlainBytes: every byte value, at every
// position of eight, after bytes of the class and before anything.
func TestLeadingDigits(t *testing.T) {
	wordtest.EveryByte(t, "leadingDigits", "01234567", func(c byte) bool { return '0' <= c && c <= '9' },
		func(w []byte) int { return leadingDigits(binary.LittleEndian.Uint64(w)) })
}

func TestPlainBytes(t *testing.T) {
	wordtest.EveryByte(t, "plainBytes", "abcdefgh", func(c byte) bool { return c != '"' && c != '\\' && c >= 0x20 },
		func(w []byte) int { return plainBytes(binary.LittleEndian.Uint64(w)) })
}

// TestStringEnd: the index past a valid string, escapes and all, at any
// length around the eight bytes read at once.
func TestStringEnd(t *testing.T) {
	for _, body := range []string{``, `a`, `abcdefg`, `abcdefgh`, `abcdefghijklmnopq`, `\"`, `abcdefg\"`, `abcdefgh\\`, `\u00e9abcdefghij\n`, "é日本語 and more text", `\\\\\\\"x`} {
		s := `"` + body + `"`
		if !json.Valid([]byte(s)) {
			t.Fatalf("case %s is not valid JSON", s)
		}
		for _, after := range []string{"", ",1]", `"x"`} {
			if got := StringEnd([]byte(s+after), 0); got != len(s) {
				t.Errorf("StringEnd(%s%s) = %d, want %d", s, after, got, len(s))
			}
		}
	}
}
