package server

import (
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/run"
)

// FuzzConfigBody feeds a posted config through every check the daemon
// makes before storing a run (aliases, file paths, parse, peers, limits):
// none may panic or run away, and a body that passes them all is within
// the limits and sends no key to a URL the poster chose.
func FuzzConfigBody(f *testing.F) {
	for _, s := range []string{
		"run: {name: a, steps: 2}\nvalidation: {episodes: 4}\n",
		`{"env": {"rounds": 1000000000}}`,
		"inference: {endpoints: [{url: 'http://127.0.0.1:1/v1', api_key_env: HOME}]}\ntrainer: {kind: jobs}\n",
		"inference: {endpoints: [{peer: a}]}\ntrainer: {peer: t}\n",
		"a0: &a [x, x]\na1: &b [*a, *a]\na2: [*b, *b]\n",
		"inference: &i {<<: *i}",
		"run: {db: /etc/passwd}",
		`{"run": {"d\u0062": "/x"}}`,
	} {
		f.Add([]byte(s))
	}
	peers, err := config.ParsePeers([]byte("inference: {a: {url: 'http://127.0.0.1:2/v1', api_key_env: A_KEY}}\ntrainers: {t: {url: 'http://127.0.0.1:3'}}\n"))
	if err != nil {
		f.Fatal(err)
	}
	limits := config.DefaultLimits()
	f.Fuzz(func(t *testing.T, body []byte) {
		if config.CheckAliases(body) != nil {
			return
		}
		if key, _ := pathKey(body); key != "" {
			return
		}
		cfg, err := config.Parse(body, config.WithEmbedded(run.ConfigDefaults()))
		if err != nil {
			return
		}
		if config.ResolvePeers(&cfg, peers, config.ResolveOptions{}) != nil || limits.Check(cfg) != nil {
			return
		}
		if cfg.Run.DB != config.Default().Run.DB {
			t.Fatalf("run.db %q got past the path check: %q", cfg.Run.DB, body)
		}
		for _, e := range cfg.Inference.Endpoints {
			if e.APIKeyEnv != config.NoAPIKey && !(e.URL == "http://127.0.0.1:2/v1" && e.APIKeyEnv == "A_KEY") {
				t.Fatalf("endpoint %+v reads a variable the operator did not declare for it: %q", e, body)
			}
		}
		if cfg.Env.Rounds > limits.MaxRounds || cfg.Env.N > limits.MaxN || cfg.Run.Steps > limits.MaxSteps {
			t.Fatalf("limits passed: %+v", cfg.Env)
		}
	})
}
