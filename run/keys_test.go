package run

import (
	"slices"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

// TestUnsetKeyVars: an api_key_env naming an unset or empty variable is
// reported, with its key; a set one, "-" (no key), none given
// (OPENAI_API_KEY) and the embedded backend are not.
func TestUnsetKeyVars(t *testing.T) {
	cfg := config.Default()
	cfg.Inference.Endpoints = []config.Endpoint{
		{URL: "http://127.0.0.1:1/v1", APIKeyEnv: "SET"},
		{URL: "http://127.0.0.1:2/v1", APIKeyEnv: "EMPTY"},
		{URL: "http://127.0.0.1:3/v1", APIKeyEnv: config.NoAPIKey},
		{URL: "http://127.0.0.1:4/v1"},
		{URL: "http://127.0.0.1:5/v1", APIKeyEnv: "MISSING"},
	}
	cfg.Trainer.Kind, cfg.Trainer.URL, cfg.Trainer.APIKeyEnv = "jobs", "http://127.0.0.1:6", "TRAINER"
	env := map[string]string{"SET": "k", "EMPTY": ""}
	got := unsetKeyVars(cfg, func(k string) string { return env[k] })
	want := []string{
		"inference.endpoints[1].api_key_env names $EMPTY, which is not set or empty: no API key is sent",
		"inference.endpoints[4].api_key_env names $MISSING, which is not set or empty: no API key is sent",
		"trainer.api_key_env names $TRAINER, which is not set or empty: no API key is sent",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unsetKeyVars = %q\nwant %q", got, want)
	}
	if got := unsetKeyVars(config.Default(), func(string) string { return "" }); got != nil {
		t.Fatalf("embedded backend: %q, want none", got)
	}
}
