// Package jsonvalid checks JSON text without decoding it.
package jsonvalid

import (
	"encoding/binary"
	"math/bits"
)

// maxDepth is encoding/json's limit on nesting: deeper text is invalid.
const maxDepth = 10000

// Valid reports whether b is one JSON value with optional white space
// around it, exactly as encoding/json.Valid does — its nesting limit
// included, and like it without checking that strings are UTF-8 — at a
// fraction of its cost: a loop over the bytes instead of a state function
// called for each (FuzzValidMatchesEncodingJSON).
func Valid(b []byte) bool {
	var buf [64]byte
	open := buf[:0] // the containers the value at i is inside: '{' or '['
	i := skipSpace(b, 0)
	for {
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(open) == maxDepth {
				return false
			}
			j := skipSpace(b, i+1)
			if j < len(b) && b[j] == c+2 { // '}' and ']' follow '{' and '[' by two
				i = j + 1
				break
			}
			open = append(open, c)
			if i = j; c == '{' {
				if i = member(b, i); i < 0 {
					return false
				}
			}
			continue // the first element
		case c == '"':
			i = str(b, i)
		case c == '-' || '0' <= c && c <= '9':
			i = number(b, i)
			if i > 0 && len(open) > 0 && open[len(open)-1] == '[' {
				i = numberRun(b, i)
			}
		case c == 't':
			i = literal(b, i, "true")
		case c == 'f':
			i = literal(b, i, "false")
		case c == 'n':
			i = literal(b, i, "null")
		default:
			return false
		}
		if i < 0 {
			return false
		}
		// After a value: the containers it ends, then a comma before the
		// next element, or the end of the text.
		for {
			i = skipSpace(b, i)
			if len(open) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := open[len(open)-1]
			if b[i] == ',' {
				if i = skipSpace(b, i+1); top == '{' {
					if i = member(b, i); i < 0 {
						return false
					}
				}
				break
			}
			if b[i] != top+2 {
				return false
			}
			open = open[:len(open)-1]
			i++
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// member reads an object member's name and colon at b[i] and returns the
// index of its value, or -1.
func member(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = str(b, i); i < 0 {
		return -1
	}
	if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

// str returns the index past the string at b[i] (a quote), or -1.
func str(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for i+8 <= len(b) { // plain bytes, eight at a time
			n := plainBytes(binary.LittleEndian.Uint64(b[i:]))
			if i += n; n < 8 {
				break
			}
		}
		if i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < ' ':
			return -1
		case c == '\\':
			if i++; i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

// number returns the index past the number at b[i], or -1.
func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(b, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

// numberRun reads the numbers that follow the array element ending at
// b[i], each after a comma and no white space (token ids, byte values):
// what the main loop would read, one trip round it each. It returns the
// index past the last, or -1 for an invalid one.
func numberRun(b []byte, i int) int {
	for i+1 < len(b) && b[i] == ',' {
		switch c := b[i+1]; {
		case '1' <= c && c <= '9':
			j := digits(b, i+2)
			if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
				if j = number(b, i+1); j < 0 { // a fraction or exponent: the whole reader
					return -1
				}
			}
			i = j
		case c == '0' || c == '-':
			if i = number(b, i+1); i < 0 {
				return -1
			}
		default:
			return i
		}
	}
	return i
}

// digits returns the index past the digits at b[i], eight bytes at a
// time while eight are left.
func digits(b []byte, i int) int {
	for i+8 <= len(b) {
		if n := leadingDigits(binary.LittleEndian.Uint64(b[i:])); n < 8 {
			return i + n
		}
		i += 8
	}
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainBytes counts the bytes x starts with, its first byte the lowest,
// that a string holds as they are: not a quote, a backslash or a control
// character. (v-1)&^v has its high bit set for a zero byte, and
// (v-0x20)&^v for one below 0x20; a borrow reaches only the bytes after
// the byte it comes from, so the first byte flagged is the first of
// those.
func plainBytes(x uint64) int {
	q := x ^ '"'*ones
	bs := x ^ '\\'*ones
	special := ((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - 0x20*ones) &^ x)
	return bits.TrailingZeros64(special&highs) / 8
}

// StringEnd returns the index past the string whose opening quote is
// b[i], in text known to be valid JSON (len(b) if it is not closed).
func StringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		for i+8 <= len(b) {
			n := plainBytes(binary.LittleEndian.Uint64(b[i:]))
			if i += n; n < 8 {
				break
			}
		}
		if i >= len(b) {
			break
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return len(b)
}

// leadingDigits counts the ASCII digits x starts with, its first byte
// the lowest. A byte below '0' borrows from, and one above '9' carries
// into, only the bytes after it, so the first byte flagged is the first
// that is not a digit.
func leadingDigits(x uint64) int {
	notDigit := ((x - '0'*ones) | (x + (0x7f-'9')*ones) | x) & highs
	return bits.TrailingZeros64(notDigit) / 8
}

// literal returns the index past word at b[i], or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}
