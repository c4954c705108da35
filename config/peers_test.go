package config_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
)

const peersYAML = `
inference:
  vllm-a: {url: "http://127.0.0.1:8001/v1", api_key_env: VLLM_A_KEY}
  open: {url: "http://127.0.0.1:8002/v1"}
trainers:
  jobs-1: {url: "http://127.0.0.1:7001", api_key_env: JOBS_KEY}
`

func mustPeers(t *testing.T) config.Peers {
	t.Helper()
	p, err := config.ParsePeers([]byte(peersYAML))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsePeers(t *testing.T) {
	p := mustPeers(t)
	if got := p.Trainers["jobs-1"].Kind; got != config.TrainerJobs {
		t.Fatalf("trainer kind defaults to %q, want jobs", got)
	}
	if got := strings.Join(p.APIKeyEnvs(), ","); got != "JOBS_KEY,VLLM_A_KEY" {
		t.Fatalf("APIKeyEnvs()=%q, want JOBS_KEY,VLLM_A_KEY", got)
	}
	for _, tt := range []struct{ in, want string }{
		{"inference: {a: {url: 'ftp://x'}}", "inference peer a: url"},
		// Credentials in a peer's URL would be copied into runs' stored
		// configs, the API's answers and metric labels.
		{"inference: {a: {url: 'http://user:pw@127.0.0.1:8/v1'}}", "inference peer a: url: http://user:xxxxx@127.0.0.1:8/v1 carries credentials"},
		{"trainers: {t: {url: 'http://127.0.0.1:9/?token=pw'}}", "trainer peer t: url"},
		{"inference: {a: {url: 'http://x', api_key_env: 'A-B'}}", `api_key_env "A-B" is not an environment variable name`},
		{"inference: {'a/b': {url: 'http://x'}}", `inference peer "a/b"`},
		{"trainers: {t: {url: 'http://x', kind: embedded}}", `kind "embedded" is not accepted`},
		{"trainers: {t: {url: 'http://x', api_key_env: '1X'}}", `trainer peer t: api_key_env "1X" is not an environment variable name`},
		{"trainers: {t: {url: 'http://x', kind: art, api_key_env: K}}", "trainer peer t: api_key_env is sent to the job API only"},
		{"inference: {a: {url: 'http://x', key: 1}}", "line 1: unknown key key (want inference"},
		{"trainers: 3", "cannot unmarshal !!int `3` into a map of peers by name (want"},
		{"inference: {a: {url: [1]}}", "cannot unmarshal !!seq into string"},
		{"a: &a [*a]", "alias"},
	} {
		if _, err := config.ParsePeers([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParsePeers(%s)=%v, want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestResolvePeers(t *testing.T) {
	p := mustPeers(t)
	cfg := mustParse(t, "inference: {endpoints: [{peer: vllm-a}, {peer: open}, {url: 'http://127.0.0.1:9/v1'}]}\ntrainer: {peer: jobs-1}\n")
	if err := config.ResolvePeers(&cfg, p, config.ResolveOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []config.Endpoint{
		{URL: "http://127.0.0.1:8001/v1", APIKeyEnv: "VLLM_A_KEY"},
		{URL: "http://127.0.0.1:8002/v1", APIKeyEnv: config.NoAPIKey},
		{URL: "http://127.0.0.1:9/v1", APIKeyEnv: config.NoAPIKey},
	}
	if fmt.Sprint(cfg.Inference.Endpoints) != fmt.Sprint(want) {
		t.Fatalf("endpoints %v, want %v", cfg.Inference.Endpoints, want)
	}
	if cfg.Trainer.URL != "http://127.0.0.1:7001" || cfg.Trainer.Kind != config.TrainerJobs || cfg.Trainer.APIKeyEnv != "JOBS_KEY" || cfg.Trainer.Peer != "" {
		t.Fatalf("trainer %+v, want jobs at http://127.0.0.1:7001", cfg.Trainer)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("resolved config does not validate: %v", err)
	}

	for _, tt := range []struct {
		doc       string
		peersOnly bool
		want      string
	}{
		// The poster cannot send the daemon's secret to its own URL.
		{"inference: {endpoints: [{url: 'http://127.0.0.1:9/v1', api_key_env: VLLM_A_KEY}]}", false, "inference.endpoints[0].api_key_env: a posted config cannot choose which environment variables"},
		{"inference: {endpoints: [{peer: vllm-a, url: 'http://127.0.0.1:9/v1'}]}", false, "names peer \"vllm-a\" and also url"},
		{"inference: {endpoints: [{peer: nope}]}", false, `"nope" is not a declared inference peer; declared: open, vllm-a`},
		{"trainer: {peer: nope}", false, `"nope" is not a declared trainer peer; declared: jobs-1`},
		// Nor the trainer's.
		{"inference: {endpoints: [{peer: open}]}\ntrainer: {kind: jobs, url: 'http://127.0.0.1:9', api_key_env: JOBS_KEY}", false, "trainer.api_key_env: a posted config cannot choose which environment variables"},
		{"trainer: {peer: jobs-1, api_key_env: VLLM_A_KEY}", false, `trainer: names peer "jobs-1" and also api_key_env`},
		{"inference: {endpoints: [{url: 'http://127.0.0.1:9/v1'}]}", true, "--peers-only"},
		{"inference: {endpoints: [{peer: open}]}\ntrainer: {kind: jobs, url: 'http://127.0.0.1:9'}", true, "trainer.url: this daemon reaches declared peers only"},
	} {
		c := mustParse(t, tt.doc)
		err := config.ResolvePeers(&c, p, config.ResolveOptions{PeersOnly: tt.peersOnly})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ResolvePeers(%s, peersOnly %v)=%v, want an error containing %q", tt.doc, tt.peersOnly, err, tt.want)
		}
	}
	// Outside the daemon a peer name alone is an error naming the key.
	c := mustParse(t, "inference: {endpoints: [{peer: vllm-a}]}\ntrainer: {kind: jobs}")
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "inference.endpoints[0].peer") {
		t.Fatalf("Validate(unresolved peer)=%v, want an error naming inference.endpoints[0].peer", err)
	}
}

func TestLimits(t *testing.T) {
	l := config.DefaultLimits()
	if err := l.Check(config.Default()); err != nil {
		t.Fatalf("the default config is over the default limits: %v", err)
	}
	for _, tt := range []struct{ doc, want string }{
		{"env: {rounds: 1000000000}", "env.rounds: is 1000000000; at most 200"},
		{"env: {n: 65}", "env.n: is 65; at most 64"},
		{"validation: {n: [5, 100]}", "validation.n[1]: is 100; at most 64"},
		{"curriculum: {schedule: '5@0,99@3'}", "curriculum.schedule: sets n 99; at most 64"},
		{"run: {steps: 100001}", "run.steps: is 100001; at most 100000"},
		// (2 groups + 4 resamples) * 683 = 4098 > 4096.
		{"grpo: {episodes_per_group: 683}", "make 4098 episodes a step; at most 4096"},
		{"grpo: {groups: 9223372036854775000, episodes_per_group: 2}", "at most 4096"},
		{"validation: {episodes: 5000}", "validation.episodes: is 5000; at most 4096"},
		{"test: {n: [5], episodes: 5000}", "test.episodes: is 5000; at most 4096"},
		{"test: {n: [5, 65]}", "test.n[1]: is 65; at most 64"},
		// 1,366 episodes at each of 3 sizes: 4,098 a validation.
		{"validation: {episodes: 1366, n: [5, 10, 15]}", "validation: 1366 episodes at each of 3 table sizes make 4098; at most 4096"},
		{"test: {n: [5, 6], episodes: 2049}", "test: 2049 episodes at each of 2 table sizes make 4098; at most 4096"},
		// Without test.n, the sizes the run trains at.
		{"curriculum: {schedule: '5@0,6@3'}\ntest: {episodes: 2049}", "test: 2049 episodes at each of 2 table sizes make 4098; at most 4096"},
		// 16 episodes x 64 philosophers x 200^2 = 40,960,000.
		{"env: {n: 64, rounds: 200}\ngrpo: {groups: 4, episodes_per_group: 4, max_resamples: 0}\nvalidation: {episodes: 2}", "grpo: 16 episodes x 64 philosophers x 200 rounds squared make a step of size 40960000; at most 500000"},
		// Validation: 24 episodes x (5 + 10 + 15) x 30^2 = 648,000.
		{"env: {rounds: 30}\nvalidation: {n: [5, 10, 15]}", "validation: 24 episodes x 30 philosophers x 30 rounds squared make a step of size 648000; at most 500000 (memory grows so: each turn resends the conversation so far) (a limit of this daemon: grpo serve --max-step-size)"},
		// Training at its largest curriculum size: (2 + 4 resamples) x 3
		// x 64 x 40^2 = 1,843,200.
		{"env: {rounds: 40}\ncurriculum: {schedule: '5@0,64@3'}\nvalidation: {episodes: 2}", "grpo: 18 episodes x 64 philosophers x 40 rounds squared make a step of size 1843200"},
	} {
		if err := l.Check(mustParse(t, tt.doc)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%s)=%v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
	// The default run, and 2 groups + 4 resamples of 682 episodes = 4092
	// (x 5 x 25 = 511,500 > 500,000: the step size is raised for it).
	l2 := l
	l2.MaxStepSize = 600000
	if err := l2.Check(mustParse(t, "grpo: {episodes_per_group: 682}")); err != nil {
		t.Errorf("Check(4092 episodes a step)=%v, want nil", err)
	}
	if err := (config.Limits{}).Check(mustParse(t, "env: {rounds: 1000000000}")); err != nil {
		t.Errorf("zero Limits check nothing, got %v", err)
	}
}

// TestCheckAliases: an alias bomb is measured, not expanded, so it is
// refused at once; a self-referring anchor is refused; ordinary anchors
// pass.
func TestCheckAliases(t *testing.T) {
	// The classic "billion laughs": 9 levels of 9 aliases = 9^9 values.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	bomb := []byte(b.String())
	start := time.Now()
	err := config.CheckAliases(bomb)
	if err == nil || !strings.Contains(err.Error(), "more than 100000 values through aliases") {
		t.Fatalf("CheckAliases(bomb)=%v, want the expansion refused", err)
	}
	if _, err := config.Parse(bomb); err == nil || !strings.Contains(err.Error(), "through aliases") {
		t.Fatalf("Parse(bomb)=%v, want the expansion refused", err)
	}
	t.Logf("bomb of %d bytes refused in %v", len(bomb), time.Since(start))
	if err := config.CheckAliases([]byte("a: &a {b: *a}")); err == nil || !strings.Contains(err.Error(), "alias to itself") {
		t.Fatalf("CheckAliases(cycle)=%v, want it refused", err)
	}
	if err := config.CheckAliases([]byte("validation: &v {temperature: 0.5}\ninference: {<<: *v}\n")); err != nil {
		t.Fatalf("CheckAliases(ordinary merge)=%v, want nil", err)
	}
}
