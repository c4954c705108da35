package config

import (
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
