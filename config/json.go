package config

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// JSON is the resolved config as JSON, for storing with the run. Parse
// reads it back to an equal Config. It panics if c holds what JSON cannot
// encode (NaN or infinite numbers, maps with non-string keys), which
// Validate rejects: call it on validated configs only.
func (c Config) JSON() json.RawMessage {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("config: encode validated config: %v", err))
	}
	return b
}

// MarshalJSON writes chat_template_kwargs even when empty: an omitted key
// would read back as the default {"enable_thinking": false}.
func (in Inference) MarshalJSON() ([]byte, error) {
	type plain Inference
	return json.Marshal(struct {
		plain
		ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
	}{plain(in), in.ChatTemplateKwargs})
}

// yamlSafeJSON rewrites the string literals of a JSON document that use
// escapes YAML lacks ("\/", UTF-16 surrogate pairs such as "\ud83d\ude00")
// into equivalent ones it reads. Other bytes, and so line numbers, stay.
func yamlSafeJSON(data []byte) []byte {
	if !bytes.ContainsRune(data, '\\') || !json.Valid(data) {
		return data
	}
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		if data[i] != '"' {
			out = append(out, data[i])
			continue
		}
		end := i + 1
		for data[end] != '"' {
			if data[end] == '\\' {
				end++
			}
			end++
		}
		lit := data[i : end+1]
		if bytes.Contains(lit, []byte(`\/`)) || bytes.Contains(lit, []byte(`\u`)) {
			lit = reencode(lit)
		}
		out = append(out, lit...)
		i = end
	}
	return out
}

// reencode decodes a valid JSON string literal and encodes it again the
// way encoding/json writes strings: UTF-8 as is, no "\/", no surrogates.
func reencode(lit []byte) []byte {
	var s string
	if err := json.Unmarshal(lit, &s); err != nil {
		return lit
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return lit
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
