package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
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

// MarshalJSON writes an empty test.n as [], not null: Parse reads a
// test section whose n is unset as asking for a test split at the sizes
// the run trains at, and [] as asking for none.
var _ json.Marshaler = Test{}

func (t Test) MarshalJSON() ([]byte, error) {
	type plain Test
	p := plain(t)
	if p.N == nil {
		p.N = []int{}
	}
	return json.Marshal(p)
}

// jsonNode reads a JSON document into the YAML node tree Parse checks and
// decodes, with the line and column of every value, so that a JSON config
// gets the same errors as YAML and JSON's escapes ("\/", surrogate pairs),
// which YAML lacks, are read as JSON reads them. ok is false when data is
// not one valid JSON value: Parse then reads it as YAML.
func jsonNode(data []byte) (n *yaml.Node, ok bool) {
	if !json.Valid(data) {
		return nil, false
	}
	r := jsonReader{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	r.dec.UseNumber()
	n, err := r.value()
	if err != nil {
		return nil, false
	}
	return n, true
}

type jsonReader struct {
	data []byte
	dec  *json.Decoder
}

// pos is the line and column (1-based) of the next token.
func (r *jsonReader) pos() (line, col int) {
	off := int(r.dec.InputOffset())
	for off < len(r.data) && strings.ContainsRune(" \t\r\n,:", rune(r.data[off])) {
		off++
	}
	line = 1 + bytes.Count(r.data[:off], []byte("\n"))
	return line, off - bytes.LastIndexByte(r.data[:off], '\n')
}

func (r *jsonReader) value() (*yaml.Node, error) {
	line, col := r.pos()
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	n := &yaml.Node{Line: line, Column: col}
	switch t := tok.(type) {
	case json.Delim:
		n.Kind, n.Tag, n.Style = yaml.MappingNode, "!!map", yaml.FlowStyle
		if t == '[' {
			n.Kind, n.Tag = yaml.SequenceNode, "!!seq"
		}
		for r.dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := r.value()
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, k)
			}
			v, err := r.value()
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := r.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	// Scalars other than strings are left plain and untagged, so that
	// YAML resolves the JSON literal as it would have in a YAML document.
	case string:
		n.Kind, n.Value, n.Style = yaml.ScalarNode, t, yaml.DoubleQuotedStyle
	case json.Number:
		n.Kind, n.Value = yaml.ScalarNode, t.String()
	case bool:
		n.Kind, n.Value = yaml.ScalarNode, strconv.FormatBool(t)
	case nil:
		n.Kind, n.Value = yaml.ScalarNode, "null"
	}
	return n, nil
}
