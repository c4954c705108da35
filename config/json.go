package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
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

// FromJSON reads a config stored by JSON back, strictly: unknown keys,
// values of the wrong type and trailing data are errors. Keys the document
// leaves out keep their Default() value; the embedded backend's defaults
// are not applied, since a stored config was resolved before it was stored.
func FromJSON(data []byte) (Config, error) {
	cfg := Default()
	// A mapping replaces the default map instead of merging into it.
	var top struct {
		Inference map[string]json.RawMessage `json:"inference"`
	}
	if err := json.Unmarshal(data, &top); err == nil {
		if _, ok := top.Inference["chat_template_kwargs"]; ok {
			cfg.Inference.ChatTemplateKwargs = nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("stored config: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, errors.New("stored config: data after the JSON object")
	}
	for k, v := range cfg.Inference.ChatTemplateKwargs {
		cfg.Inference.ChatTemplateKwargs[k] = yamlNumbers(v)
	}
	cfg.normalize()
	return cfg, nil
}

// yamlNumbers gives the numbers of a decoded JSON value the Go types Parse
// gives them (int when integral and written without a fraction or
// exponent, float64 otherwise), so that a stored config reads back equal.
func yamlNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil && int64(int(i)) == i {
			return int(i)
		}
		if u, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return u
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, x := range v {
			v[k] = yamlNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = yamlNumbers(x)
		}
	}
	return v
}

// MarshalJSON writes chat_template_kwargs even when empty: an omitted key
// would read back as the default {"enable_thinking": false}.
var _ json.Marshaler = Inference{}

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
