package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	yaml "go.yaml.in/yaml/v3"

	"github.com/grpo-dev/grpo/config"
)

// The embedded backend's defaults as the wiring would pass them; config
// does not know the backend, so the tests make up their own.
const (
	refModel = "ref-base"
	refLR    = 0.05
)

var refDefaults = config.EmbeddedDefaults{Model: refModel, LearningRate: refLR}

// embeddedDefault is what an empty file resolves to: Default() pointed at
// the reference backend.
func embeddedDefault() config.Config {
	c := config.Default()
	c.Inference.Model = refModel
	c.Trainer.BaseModel = refModel
	c.Trainer.Hyperparameters.LearningRate = refLR
	return c
}

func mustParse(tb testing.TB, s string) config.Config {
	tb.Helper()
	c, err := config.Parse([]byte(s), config.WithEmbedded(refDefaults))
	if err != nil {
		tb.Fatalf("Parse(%q): %v", s, err)
	}
	return c
}

func TestDefault(t *testing.T) {
	c := config.Default()
	if got, want := c.Run.Steps, 16; got != want {
		t.Fatalf("run.steps=%d, want %d", got, want)
	}
	if got, want := c.Trainer.Hyperparameters.LearningRate, 5.0e-6; got != want {
		t.Fatalf("learning_rate=%v, want %v", got, want)
	}
	if got, want := time.Duration(c.Inference.RequestTimeout), 60*time.Second; got != want {
		t.Fatalf("request_timeout=%v, want %v", got, want)
	}
	if got, want := time.Duration(c.Trainer.JobTimeout), 30*time.Minute; got != want {
		t.Fatalf("job_timeout=%v, want %v", got, want)
	}
	if got, want := c.Trainer.Hyperparameters, (config.Hyperparameters{LearningRate: 5e-6, Epsilon: 0.2, EpsilonHigh: 0.2, Epochs: 1, MiniBatches: 1}); got != want {
		t.Fatalf("hyperparameters=%+v, want %+v", got, want)
	}
	// Each call is a fresh value: callers may mutate it.
	c.Inference.ChatTemplateKwargs["enable_thinking"] = true
	c.Trainer.LoRA.TargetModules[0] = "x"
	if d := config.Default(); d.Inference.ChatTemplateKwargs["enable_thinking"] != false || d.Trainer.LoRA.TargetModules[0] != "q_proj" {
		t.Fatalf("Default() shares state between calls: %+v", d)
	}
}

func TestParse_Empty(t *testing.T) {
	for _, in := range []string{"", "\n", "# nothing here\n", "---\n", "null\n", "~", "{}"} {
		c, err := config.Parse([]byte(in), config.WithEmbedded(refDefaults))
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if got, want := c, embeddedDefault(); !reflect.DeepEqual(got, want) {
			t.Fatalf("Parse(%q)=%+v, want %+v", in, got, want)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse(%q).Validate(): %v", in, err)
		}
	}
}

func TestLoad_Design(t *testing.T) {
	c, err := config.Load("testdata/design.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Run.Name = "dp5-shaped"
	want.Inference.Endpoints = []config.Endpoint{{URL: "http://127.0.0.1:8000/v1", APIKeyEnv: "VLLM_API_KEY"}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Load(design.yaml)=\n%+v\nwant\n%+v", c, want)
	}
	// The example pairs the embedded trainer with an endpoint, which cannot
	// work; with the job trainer it is a valid run.
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "inference.endpoints: set, but trainer.kind is embedded") {
		t.Fatalf("Validate()=%v, want the embedded/endpoints conflict", err)
	}
	c.Trainer.Kind = config.TrainerJobs
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() with trainer.kind jobs: %v", err)
	}
}

func TestLoad_Errors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(path, []byte("run:\n  steps: 3\ngrpo:\n  grops: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	if got, want := errString(err), path+":4:3: grpo.grops: unknown key (did you mean groups?); accepted: groups, episodes_per_group, advantage, resample_zero_variance, max_resamples, max_off_policy_steps"; got != want {
		t.Fatalf("Load()=%q, want %q", got, want)
	}
	var cerr *config.Error
	if !errors.As(err, &cerr) || cerr.Key != "grpo.grops" || cerr.Line != 4 || cerr.Column != 3 || cerr.File != path {
		t.Fatalf("Load() error=%#v, want *config.Error for grpo.grops at %s:4:3", err, path)
	}

	if _, err := config.Load(filepath.Join(dir, "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("Load(missing)=%v, want a not-exist error naming the file", err)
	}

	if err := os.WriteFile(path, []byte("run:\n  steps: [1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err == nil || !strings.HasPrefix(err.Error(), path+":") {
		t.Fatalf("Load(bad syntax)=%v, want an error starting with the file name", err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestParse_Errors(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     string // the whole error
	}{
		{"unknown key", "grpo:\n  grops: 3\n",
			"line 2, column 3: grpo.grops: unknown key (did you mean groups?); accepted: groups, episodes_per_group, advantage, resample_zero_variance, max_resamples, max_off_policy_steps"},
		{"unknown section", "rn: {}\n",
			"line 1, column 1: rn: unknown key (did you mean run?); accepted: run, env, reward, grpo, inference, trainer, validation, curriculum, test"},
		{"unknown key, no suggestion", "trainer:\n  gpu: a100\n",
			"line 2, column 3: trainer.gpu: unknown key; accepted: kind, url, peer, api_key_env, base_model, lora, hyperparameters, job_timeout, base_coordination"},
		{"unknown key in a list item", "inference:\n  endpoints:\n    - url: http://127.0.0.1:1/v1\n    - urll: http://127.0.0.1:2/v1\n",
			"line 4, column 7: inference.endpoints[1].urll: unknown key (did you mean url?); accepted: url, api_key_env, peer"},
		{"unknown key deep", "grpo:\n  advantage:\n    stdev: unbiased\n",
			"line 3, column 5: grpo.advantage.stdev: unknown key; accepted: std_normalize, std, baseline"},
		{"not an integer", "run:\n  steps: many\n",
			`line 2, column 10: run.steps: expected an integer, got "many"`},
		{"float for integer", "env:\n  n: 2.5\n",
			`line 2, column 6: env.n: expected an integer, got "2.5"`},
		{"integral float for integer is fine, fraction is not", "env:\n  n: 2.0\n  rounds: 1e0\n  deadlock_patience: 0.5\n",
			`line 4, column 22: env.deadlock_patience: expected an integer, got "0.5"`},
		{"list for string", "inference:\n  endpoints:\n    - url: [a]\n",
			`line 3, column 12: inference.endpoints[0].url: expected a string, got a list`},
		{"list item", "validation:\n  n: [5, x]\n",
			`line 2, column 10: validation.n[1]: expected an integer, got "x"`},
		{"scalar for list", "validation:\n  n: 5\n",
			`line 2, column 6: validation.n: expected a list of integers, got "5"`},
		{"scalar for section", "grpo: 3\n",
			`line 1, column 7: grpo: expected a mapping with keys groups, episodes_per_group, advantage, resample_zero_variance, max_resamples, max_off_policy_steps, got "3"`},
		{"long value", "run:\n  steps: " + strings.Repeat("x", 100) + "\n",
			`line 2, column 10: run.steps: expected an integer, got "` + strings.Repeat("x", 40) + `"...`},
		{"bool", "grpo:\n  advantage:\n    std_normalize: maybe\n",
			`line 3, column 20: grpo.advantage.std_normalize: expected true or false, got "maybe"`},
		{"flow mapping on one line", "grpo: {advantage: {std: population, baseline: [1]}}\n",
			`line 1, column 47: grpo.advantage.baseline: expected a string, got a list`},
		{"duplicate key", "run:\n  steps: 3\n  steps: 4\n",
			`line 3, column 3: run.steps: set twice (first at line 2)`},
		{"bool hyperparameter", "trainer:\n  hyperparameters: {reset_optimizer: maybe}\n",
			`line 2, column 38: trainer.hyperparameters.reset_optimizer: expected true or false, got "maybe"`},
		{"fractional mini-batches", "trainer:\n  hyperparameters: {mini_batches: 1.5}\n",
			`line 2, column 35: trainer.hyperparameters.mini_batches: expected an integer, got "1.5"`},
		{"misspelt hyperparameter", "trainer:\n  hyperparameters: {minibatches: 2}\n",
			`line 2, column 21: trainer.hyperparameters.minibatches: unknown key (did you mean mini_batches?); accepted: learning_rate, epsilon, epsilon_high, kl_beta, epochs, mini_batches, warmup_steps, reset_optimizer`},
		{"kwargs not a mapping", "inference:\n  chat_template_kwargs: [1]\n",
			`line 2, column 25: inference.chat_template_kwargs: expected a mapping, got a list`},
		{"root not a mapping", "- run\n",
			`line 1, column 1: expected a mapping with keys run, env, reward, grpo, inference, trainer, validation, curriculum, test, got a list`},
		{"two documents", "run: {steps: 2}\n---\nenv: {n: 3}\n",
			`line 3: a second YAML document; a config file holds one`},
		{"syntax", "run:\n  steps: [1, 2\n",
			`line 1: did not find expected ',' or ']'`},
		{"tab", "run:\n\tsteps: 3\n",
			`line 2: found character that cannot start any token (YAML indents with spaces, not tabs)`},
		{"merged unknown key", "validation: &v\n  episodes: 4\ninference:\n  <<: *v\n",
			`line 2, column 3: inference.episodes: unknown key; accepted: endpoints, model, temperature, max_tokens, chat_template_kwargs, concurrency, request_timeout, retries, retry_budget, episode_replays, max_errored_fraction, adapters, outage_window`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tt.in))
			if got := errString(err); got != tt.want {
				t.Fatalf("Parse(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParse_Values(t *testing.T) {
	c := mustParse(t, `
run: {name: r1, steps: 8, seed: 7}
env: {n: 10, mode: sequential}
validation:
  n: [5, 10]
inference:
  chat_template_kwargs: {top_k: 20}
curriculum:
  promote: {sizes: [5, 10], threshold: 0.5}
`)
	if got, want := c.Run, (config.Run{Name: "r1", Steps: 8, Seed: 7, DB: "grpo.db"}); got != want {
		t.Fatalf("run=%+v, want %+v", got, want)
	}
	if got, want := c.Env.N, 10; got != want {
		t.Fatalf("env.n=%d, want %d", got, want)
	}
	if got, want := c.Env.Rounds, 5; got != want {
		t.Fatalf("env.rounds=%d, want %d (default kept)", got, want)
	}
	if got, want := c.Validation.N, []int{5, 10}; !reflect.DeepEqual(got, want) {
		t.Fatalf("validation.n=%v, want %v", got, want)
	}
	// A mapping replaces the default kwargs rather than merging into them.
	if got, want := c.Inference.ChatTemplateKwargs, map[string]any{"top_k": 20}; !reflect.DeepEqual(got, want) {
		t.Fatalf("chat_template_kwargs=%v, want %v", got, want)
	}
	if got, want := c.Curriculum.Promote, (config.PromoteRule{Sizes: []int{5, 10}, Threshold: 0.5}); !reflect.DeepEqual(got, want) {
		t.Fatalf("curriculum.promote=%+v, want %+v", got, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	// Anchors and merge keys are YAML: they work.
	c = mustParse(t, "validation: &v\n  temperature: 0.7\ninference:\n  <<: *v\n")
	if got, want := c.Inference.Temperature, 0.7; got != want {
		t.Fatalf("merged inference.temperature=%v, want %v", got, want)
	}

	c = mustParse(t, "inference:\n  chat_template_kwargs: {}\n  endpoints:\n")
	if got := c.Inference.ChatTemplateKwargs; len(got) != 0 {
		t.Fatalf("chat_template_kwargs=%#v, want empty", got)
	}
	if got := c.Inference.Endpoints; got == nil || len(got) != 0 {
		t.Fatalf("endpoints=%#v, want empty", got)
	}
}

func TestParse_Embedded(t *testing.T) {
	const jobs = "trainer: {kind: jobs}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n"
	for _, tt := range []struct {
		name, in         string
		lr               float64
		model, baseModel string
	}{
		{"empty", "", refLR, refModel, refModel},
		{"lr set", "trainer:\n  hyperparameters: {learning_rate: 0.5}\n", 0.5, refModel, refModel},
		// Set to the default value is still set: detection reads the file,
		// not the value.
		{"lr set to the default", "trainer:\n  hyperparameters: {learning_rate: 5.0e-6}\n", 5.0e-6, refModel, refModel},
		{"lr null", "trainer:\n  hyperparameters: {learning_rate: null}\n", refLR, refModel, refModel},
		{"other hyperparameter set", "trainer:\n  hyperparameters: {epochs: 2}\n", refLR, refModel, refModel},
		{"model set", "inference: {model: mine}\n", refLR, "mine", refModel},
		{"base model set", "trainer: {base_model: Qwen/Qwen3-14B}\n", refLR, refModel, "Qwen/Qwen3-14B"},
		{"json lr set", `{"trainer": {"hyperparameters": {"learning_rate": 0.25}}}`, 0.25, refModel, refModel},
		{"jobs", jobs, 5.0e-6, config.DefaultModel, config.DefaultModel},
		{"embedded with endpoints", "inference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", 5.0e-6, config.DefaultModel, config.DefaultModel},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.in)
			if got := c.Trainer.Hyperparameters.LearningRate; got != tt.lr {
				t.Errorf("learning_rate=%v, want %v", got, tt.lr)
			}
			if got := c.Inference.Model; got != tt.model {
				t.Errorf("inference.model=%q, want %q", got, tt.model)
			}
			if got := c.Trainer.BaseModel; got != tt.baseModel {
				t.Errorf("trainer.base_model=%q, want %q", got, tt.baseModel)
			}
		})
	}
}

func TestParse_JSON(t *testing.T) {
	in := "{\n\t\"run\": {\"name\": \"j1\", \"steps\": 4},\n\t\"trainer\": {\"kind\": \"jobs\", \"job_timeout\": \"2m\"},\n" +
		"\t\"inference\": {\"request_timeout\": \"5s\", \"endpoints\": [{\"url\": \"http://127.0.0.1:8000/v1\"}, {\"url\": \"https://127.0.0.1:8001/v1\", \"api_key_env\": \"K2\"}]}\n}\n"
	c := mustParse(t, in)
	want := config.Default()
	want.Run.Name, want.Run.Steps = "j1", 4
	want.Trainer.Kind = config.TrainerJobs
	want.Trainer.JobTimeout = config.Duration(2 * time.Minute)
	want.Inference.RequestTimeout = config.Duration(5 * time.Second)
	want.Inference.Endpoints = []config.Endpoint{{URL: "http://127.0.0.1:8000/v1"}, {URL: "https://127.0.0.1:8001/v1", APIKeyEnv: "K2"}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("Parse(JSON)=\n%+v\nwant\n%+v", c, want)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	_, err := config.Parse([]byte(`{"grpo": {"grops": 1}}`))
	if got, want := errString(err), "line 1, column 11: grpo.grops: unknown key (did you mean groups?)"; !strings.HasPrefix(got, want) {
		t.Fatalf("Parse(JSON, unknown key)=%q, want prefix %q", got, want)
	}
	_, err = config.Parse([]byte(`{"inference": {"endpoints": [{"url": "http://127.0.0.1:1"}, {"url": {}}]}}`))
	if got, want := errString(err), `line 1, column 69: inference.endpoints[1].url: expected a string, got a mapping`; got != want {
		t.Fatalf("Parse(JSON, bad url)=%q, want %q", got, want)
	}
}

// TestParse_JSONEscapes covers JSON string escapes that YAML lacks.
func TestParse_JSONEscapes(t *testing.T) {
	c := mustParse(t, `{"run": {"name": "a\/b"}, "inference": {"model": "\ud83d\ude00 caf\u00e9 \"q\" \\ \u2028", "endpoints": []}}`)
	if got, want := c.Run.Name, "a/b"; got != want {
		t.Fatalf("run.name=%q, want %q", got, want)
	}
	if got, want := c.Inference.Model, "\U0001F600 café \"q\" \\ \u2028"; got != want {
		t.Fatalf("inference.model=%q, want %q", got, want)
	}
	// Lines stay where they were.
	_, err := config.Parse([]byte("{\n  \"run\": {\"name\": \"\\/\"},\n  \"grpo\": {\"grops\": 1}\n}\n"))
	if got, want := errString(err), "line 3, column 12: grpo.grops: unknown key"; !strings.HasPrefix(got, want) {
		t.Fatalf("Parse()=%q, want prefix %q", got, want)
	}
}

// TestJSON_RoundTrip checks that a stored config reads back equal.
func TestJSON_RoundTrip(t *testing.T) {
	design, err := config.Load("testdata/design.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]config.Config{
		"embedded default": embeddedDefault(),
		"design":           design,
		"empty kwargs":     mustParse(t, "inference: {chat_template_kwargs: {}}\ncurriculum: {schedule: '5@0,10@3'}\n"),
		"null kwargs":      mustParse(t, "inference: {chat_template_kwargs: null, request_timeout: 1.5s}\n"),
		"promote":          mustParse(t, "curriculum: {promote: {sizes: [5, 7], threshold: -0.25}}\nrun: {seed: -3}\n"),
	} {
		b := c.JSON()
		got, err := config.Parse(b)
		if err != nil {
			t.Fatalf("%s: Parse(%s): %v", name, b, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: Parse(JSON())=\n%+v\nwant\n%+v\nJSON: %s", name, got, c, b)
		}
		if got, err := config.FromJSON(b); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: FromJSON(JSON())=%+v, %v; want %+v\nJSON: %s", name, got, err, c, b)
		}
		// YAML written by yaml.Marshal reads back too.
		y, err := yaml.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := config.Parse(y); err != nil || !reflect.DeepEqual(got, c) {
			t.Fatalf("%s: Parse(yaml.Marshal())=%+v, %v; want %+v\nYAML:\n%s", name, got, err, c, y)
		}
	}
	if got, want := string(mustParse(t, "").JSON()), `"request_timeout":"1m0s"`; !strings.Contains(got, want) {
		t.Fatalf("JSON()=%s, want it to contain %s", got, want)
	}
}

func TestParse_Aliases(t *testing.T) {
	_, err := config.Parse([]byte("inference: &i\n  <<: *i\n"))
	if got, want := errString(err), `line 1, column 12: inference: the value of anchor "i" contains an alias to itself`; got != want {
		t.Fatalf("Parse(self merge)=%q, want %q", got, want)
	}
	// Each endpoint merges the previous one twice: 2^40 values if expanded.
	var b strings.Builder
	b.WriteString("inference:\n  endpoints:\n    - &e0 {url: 'http://127.0.0.1:1'}\n")
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "    - &e%d {<<: [*e%d, *e%d]}\n", i, i-1, i-1)
	}
	_, err = config.Parse([]byte(b.String()))
	if got, want := errString(err), "through aliases"; !strings.Contains(got, want) {
		t.Fatalf("Parse(alias bomb)=%q, want an error containing %q", got, want)
	}
}

// TestFromJSON checks that stored configs are read strictly.
func TestFromJSON(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"grpo": {"grops": 1}}`, `unknown field "grops"`},
		{`{"run": {"steps": "x"}}`, "cannot unmarshal string"},
		{`{"run": {}} {}`, "data after the JSON object"},
		{`run: {}`, "invalid character"},
	} {
		if _, err := config.FromJSON([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("FromJSON(%s)=%v, want an error containing %q", tt.in, err, tt.want)
		}
	}
	// Left-out keys keep their defaults; a stored map replaces the default one.
	c, err := config.FromJSON([]byte(`{"run": {"name": "a\/b"}, "inference": {"chat_template_kwargs": {"x": 1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Run.Name = "a/b"
	want.Inference.ChatTemplateKwargs = map[string]any{"x": 1}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("FromJSON()=%+v, want %+v", c, want)
	}
}

// TestValidationNDefault: a document that leaves validation.n unset
// validates at the sizes it trains at, not at n=5; one that sets it (even
// to the value the default would give) keeps what it wrote.
func TestValidationNDefault(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []int
	}{
		{"", []int{5}},
		{"env: {n: 2}\n", []int{2}},
		{"env: {n: 7}\nvalidation: {n: null}\n", []int{7}},
		{"env: {n: 2}\nvalidation: {n: [5]}\n", []int{5}},
		{"env: {n: 2}\nvalidation: {episodes: 4}\n", []int{2}},
		{"env: {n: 3}\ncurriculum: {schedule: \"4@0,6@2,4@5,8@7\"}\n", []int{4, 6, 8}},
		{"env: {n: 3}\ncurriculum: {promote: {sizes: [3, 9], threshold: 0.5}}\n", []int{3, 9}},
	} {
		c := mustParse(t, tc.doc)
		if got := c.Validation.N; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q): validation.n=%v, want %v", tc.doc, got, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Parse(%q).Validate()=%v", tc.doc, err)
		}
	}
	// A stored config reads back with what it stored.
	c := mustParse(t, "env: {n: 2}\nvalidation: {n: [5]}\n")
	back, err := config.FromJSON(c.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := back.Validation.N, []int{5}; !reflect.DeepEqual(got, want) {
		t.Fatalf("FromJSON: validation.n=%v, want %v", got, want)
	}
}

// TestTestNDefault: a document with a test section that leaves test.n
// unset measures the test split at the sizes it trains at (as
// validation.n), and stores that value; one without a test section asks
// for no test split, and TestSizes still gives the sizes it trains at (what
// grpo eval measures it at); a test.n it writes, even [], is kept.
func TestTestNDefault(t *testing.T) {
	for _, tc := range []struct {
		doc       string
		n         []int // test.n after Parse
		sizes     []int // TestSizes()
		asksForIt bool  // Test.Set()
	}{
		{"", nil, []int{5}, false},
		{"env: {n: 2}\n", nil, []int{2}, false},
		{"env: {n: 2}\nvalidation: {n: [5, 7]}\n", nil, []int{2}, false},
		{"env: {n: 2}\ntest: null\n", nil, []int{2}, false},
		{"env: {n: 2}\ntest: {episodes: 50}\n", []int{2}, []int{2}, true},
		{"env: {n: 2}\ntest: {}\n", []int{2}, []int{2}, true},
		{"env: {n: 2}\nvalidation: {n: [5, 7]}\ntest: {seed: 3000000}\n", []int{2}, []int{2}, true},
		{"env: {n: 3}\ncurriculum: {schedule: \"4@0,6@2,4@5,8@7\"}\ntest: {episodes: 10}\n", []int{4, 6, 8}, []int{4, 6, 8}, true},
		{"env: {n: 3}\ncurriculum: {promote: {sizes: [3, 9], threshold: 0.5}}\n", nil, []int{3, 9}, false},
		{"env: {n: 2}\ntest: {n: [5, 10]}\n", []int{5, 10}, []int{5, 10}, true},
		{"env: {n: 2}\ntest: {n: [2]}\n", []int{2}, []int{2}, true},
		{"env: {n: 2}\ntest: {n: [], episodes: 50}\n", nil, []int{2}, false},
		{`{"env": {"n": 4}, "test": {"episodes": 8}}`, []int{4}, []int{4}, true},
	} {
		c := mustParse(t, tc.doc)
		if got := c.Test.N; !reflect.DeepEqual(got, tc.n) {
			t.Errorf("Parse(%q): test.n=%v, want %v", tc.doc, got, tc.n)
		}
		if got := c.TestSizes(); !reflect.DeepEqual(got, tc.sizes) {
			t.Errorf("Parse(%q).TestSizes()=%v, want %v", tc.doc, got, tc.sizes)
		}
		if got := c.Test.Set(); got != tc.asksForIt {
			t.Errorf("Parse(%q): Test.Set()=%v, want %v", tc.doc, got, tc.asksForIt)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("Parse(%q).Validate()=%v", tc.doc, err)
		}
	}
	// The stored config reads back with the value the default gave.
	c := mustParse(t, "env: {n: 2}\ntest: {episodes: 50}\n")
	back, err := config.FromJSON(c.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := back.Test.N, []int{2}; !reflect.DeepEqual(got, want) {
		t.Fatalf("FromJSON: test.n=%v, want %v", got, want)
	}
	// A stored config without a test split has a test section (n: []):
	// parsed again, it still asks for none.
	stored := mustParse(t, "env: {n: 2}\n").JSON()
	if again := mustParse(t, string(stored)); again.Test.Set() {
		t.Fatalf("Parse(%s): test.n=%v, want none", stored, again.Test.N)
	}
}

// TestParse_OptimizerHyperparameters: the optimizer's keys parse, survive
// the stored JSON, and a config stored before they existed reads back with
// their defaults (1, 0, false).
func TestParse_OptimizerHyperparameters(t *testing.T) {
	c := mustParse(t, "trainer:\n  hyperparameters: {mini_batches: 4, warmup_steps: 12, reset_optimizer: true}\n")
	h := c.Trainer.Hyperparameters
	if got, want := [3]any{h.MiniBatches, h.WarmupSteps, h.ResetOptimizer}, [3]any{4, 12, true}; got != want {
		t.Fatalf("mini_batches, warmup_steps, reset_optimizer = %v, want %v", got, want)
	}
	back, err := config.FromJSON(c.JSON())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := back.Trainer.Hyperparameters, h; got != want {
		t.Fatalf("FromJSON(JSON()) hyperparameters=%+v, want %+v", got, want)
	}
	old, err := config.FromJSON([]byte(`{"trainer": {"hyperparameters": {"learning_rate": 0.5, "epsilon": 0.2, "epsilon_high": 0.2, "kl_beta": 0, "epochs": 2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := old.Trainer.Hyperparameters, (config.Hyperparameters{LearningRate: 0.5, Epsilon: 0.2, EpsilonHigh: 0.2, Epochs: 2, MiniBatches: 1}); got != want {
		t.Fatalf("stored before the keys: hyperparameters=%+v, want %+v", got, want)
	}
}
