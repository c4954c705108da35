// Package jsonvalid checks JSON text without decoding it.
package jsonvalid

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

func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// literal returns the index past word at b[i], or -1.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}
