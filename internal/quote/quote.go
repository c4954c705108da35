// Package quote shortens untrusted bodies for error messages.
package quote

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// Limit is how many bytes of a body an error message quotes.
const Limit = 120

// Body quotes the first Limit bytes of data, trimmed, cut on a rune
// boundary, with "..." when it was cut.
func Body(data []byte) string {
	data = bytes.TrimSpace(data)
	if len(data) <= Limit {
		return strconv.Quote(string(data))
	}
	cut := Limit
	for cut > 0 && !utf8.RuneStart(data[cut]) {
		cut--
	}
	return strconv.Quote(string(data[:cut])) + "..."
}
