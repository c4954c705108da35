package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

// jobs is a valid run against external servers, for snippets that need one.
const jobs = "trainer: {kind: jobs, url: 'http://127.0.0.1:7000'}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n"

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string // substring of the error; "" for valid
	}{
		{"", ""},
		{jobs, ""},
		{"run: {steps: 0}", "run.steps: is 0; need at least 1 step"},
		{"run: {name: a/../b}", `run.name: "a/../b" is not accepted; use 1 to 64 of A-Z a-z 0-9 . _ - in segments joined by '/'`},
		{"run: {name: ..}", `run.name: ".." is not accepted`},
		{"run: {name: " + strings.Repeat("a", 65) + "}", "run.name: "},
		{"run: {name: " + strings.Repeat("a", 64) + "}", ""},
		{"run: {name: dp5_shaped-v1.2}", ""},
		{"env: {n: 1}", "env.n: is 1; need at least 2 philosophers"},
		{"inference: {chat_template_kwargs: " + strings.Repeat("{a: ", 32) + "1" + strings.Repeat("}", 32) + "}", ""},
		{"inference: {chat_template_kwargs: {a: " + strings.Repeat("[", 32) + "1" + strings.Repeat("]", 32) + "}}", "inference.chat_template_kwargs: nests 33 levels deep; at most 32 (it is sent with every request)"},
		{"inference: {chat_template_kwargs: {a: " + strings.Repeat("x", 17000) + "}}", "inference.chat_template_kwargs: is 17008 bytes as JSON; at most 16384"},
		{"env: {n: 1001}", "env.n: is 1001; at most 1000 (grpo's bound on any run: beyond it a step's episodes or a table's agents do not fit in memory)"},
		{"env: {n: 1000}", ""},
		{"env: {rounds: 10001}", "env.rounds: is 10001; at most 10000 (grpo's bound"},
		{"grpo: {groups: 1000000, episodes_per_group: 1000000}", "grpo: groups 1000000 + max_resamples 4 of 1000000 episodes each make 1000004000000 episodes a step; at most 100000 (grpo's bound"},
		{"validation: {episodes: 100001}", "validation.episodes: is 100001; at most 100000 (grpo's bound"},
		{"env: {rounds: 0}", "env.rounds: is 0; need at least 1 round"},
		{"env: {mode: diagonal}", `env.mode: "diagonal" is not accepted; accepted: simultaneous, sequential`},
		{"env: {mode: sequential}", ""},
		{"env: {deadlock_patience: 0}", "env.deadlock_patience: is 0; need at least 1 round"},
		{"reward: {function: best}", `reward.function: "best" is not accepted; accepted: shaped, paper`},
		{"reward: {function: paper}", ""},
		{"reward: {weights: {gamma: .nan}}", "reward.weights.gamma: is NaN; need a finite number"},
		{"grpo: {groups: 0}", "grpo.groups: is 0; need at least 1 group"},
		{"grpo: {episodes_per_group: 1}", "grpo.episodes_per_group: is 1; need at least 2: a group of one episode has no reward variance"},
		{"grpo: {advantage: {std: sample}}", `grpo.advantage.std: "sample" is not accepted; accepted: population, unbiased`},
		{"grpo: {advantage: {baseline: median}}", `grpo.advantage.baseline: "median" is not accepted (did you mean mean?); accepted: mean, leave-one-out`},
		{"grpo: {advantage: {std_normalize: false, std: unbiased, baseline: leave-one-out}}", ""},
		{"grpo: {max_resamples: -1}", "grpo.max_resamples: is -1; need 0 or more"},
		{"grpo: {max_off_policy_steps: 1}", ""},
		{"grpo: {max_off_policy_steps: 1}\ntrainer: {kind: art}", "grpo.max_off_policy_steps: is 1 with trainer.kind art; ART keeps only its best and latest checkpoints"},
		{"grpo: {max_off_policy_steps: 2}\ninference: {adapters: {naming: inplace}}", "grpo.max_off_policy_steps: is 2 with inference.adapters.naming inplace; an asynchronous pipeline samples with older adapters while newer ones load, so it needs naming per-step"},
		{"grpo: {max_off_policy_steps: -1}", "grpo.max_off_policy_steps: is -1; need 0 (synchronous) or more (rollouts may use an adapter that many steps old)"},
		{jobs + "  model: ''\n", "inference.model: is empty"},
		{"inference: {temperature: -0.1}", "inference.temperature: is -0.1; need a number >= 0"},
		{"inference: {temperature: 0}", ""},
		{"inference: {max_tokens: 0}", "inference.max_tokens: is 0; need at least 1"},
		{"inference: {concurrency: 0}", "inference.concurrency: is 0; need at least 1 request in flight"},
		{"inference: {request_timeout: 0s}", "inference.request_timeout: is 0s; need a duration > 0"},
		{"inference: {request_timeout: -5s}", "inference.request_timeout: is -5s; need a duration > 0"},
		{"inference: {retries: -1}", "inference.retries: is -1; need 0 or more"},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', api_key_env: JOBS_KEY}\ninference: {endpoints: [{url: 'http://127.0.0.1:8000/v1'}]}\n", ""},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', api_key_env: 'JOBS-KEY'}\ninference: {endpoints: [{url: 'http://127.0.0.1:8000/v1'}]}\n", `trainer.api_key_env: "JOBS-KEY" is not an environment variable name`},
		{"trainer: {api_key_env: JOBS_KEY}", "trainer.api_key_env: is set, but trainer.kind is embedded"},
		{"inference: {adapters: {naming: random}}", `inference.adapters.naming: "random" is not accepted; accepted: per-step, inplace`},
		{"inference: {adapters: {inplace: maybe}}", `inference.adapters.inplace: "maybe" is not accepted; accepted: auto, load_inplace, reload`},
		{"inference: {outage_window: -1s}", `inference.outage_window: is -1s; need 0 (fail at once) or a duration such as 2m`},
		{"inference: {adapters: {naming: inplace}}", ""},
		{"inference: {adapters: {keep: 0}}", "inference.adapters.keep: is 0; need at least 1 adapter loaded"},
		// Upper bounds: a typo is refused naming the key, the value, the
		// limit and what to do; the limit itself is accepted.
		{"inference: {concurrency: 2000000}", "inference.concurrency: is 2000000; at most 100000 requests in flight (each holds a connection"},
		{"inference: {concurrency: 100001}", "inference.concurrency: is 100001; at most 100000 requests in flight"},
		{"inference: {concurrency: 100000}", ""},
		{"inference: {max_tokens: 1e9}", "inference.max_tokens: is 1000000000; at most 16777216 tokens, beyond any model's context window"},
		{"inference: {max_tokens: 16777217}", "inference.max_tokens: is 16777217; at most 16777216 tokens"},
		{"inference: {max_tokens: 16777216}", ""},
		{"inference: {retries: 101}", "inference.retries: is 101; at most 100 (100 retries already wait 4 to 8 minutes of backoff at one endpoint); to retry for longer, raise the retry budget (inference.retry_budget"},
		{"inference: {retries: 100}", ""},
		{"inference: {episode_replays: 11}", "inference.episode_replays: is 11; at most 10 (each replay plays the episode again"},
		{"inference: {episode_replays: 10}", ""},
		{"inference: {adapters: {keep: 1001}}", "inference.adapters.keep: is 1001; at most 1000 adapters (each stays loaded on every inference server"},
		{"inference: {adapters: {keep: 1000}}", ""},
		{"inference: {outage_window: 24h1s}", "inference.outage_window: is 24h0m1s; at most 24h (with every endpoint down for a day"},
		{"inference: {outage_window: 1440m}", ""},
		{"inference: {outage_window: 0}", ""},
		{"inference: {request_timeout: 24h1s}", "inference.request_timeout: is 24h0m1s; at most 24h (one attempt of one request"},
		{"inference: {request_timeout: 86401s}", "inference.request_timeout: is 24h0m1s; at most 24h"},
		{"inference: {request_timeout: 24h}", ""},
		{"inference: {retry_budget: 25h}", "inference.retry_budget: is 25h0m0s; at most 24h (with an endpoint failing every request for a day"},
		{"inference: {retry_budget: 24h}", ""},
		{"inference: {retry_budget: 0}", ""},
		{"inference: {retry_budget: -1s}", "inference.retry_budget: is -1s; need 0 (drain a failing endpoint at once: retries alone bound a request) or a duration such as 2m"},
		{"trainer: {job_timeout: 168h1s}", "trainer.job_timeout: is 168h0m1s; at most 168h (7 days; a job trains one step's episodes"},
		{"trainer: {job_timeout: 8760h}", "trainer.job_timeout: is 8760h0m0s; at most 168h"},
		{"trainer: {job_timeout: 168h}", ""},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000'}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}, {url: '127.0.0.1:8001'}]\n",
			`inference.endpoints[1].url: "127.0.0.1:8001" is not an http(s) URL such as http://127.0.0.1:8000/v1`},
		{"trainer: {kind: jobs}\ninference:\n  endpoints: [{url: 'ftp://127.0.0.1/v1'}]\n", `inference.endpoints[0].url: "ftp://127.0.0.1/v1" is not an http(s) URL`},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:9/'}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8/secret.txt?'}]\n", `inference.endpoints[0].url: "http://127.0.0.1:8/secret.txt?" has a query or a fragment`},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:9/'}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8/secret.txt#'}]\n", `inference.endpoints[0].url: "http://127.0.0.1:8/secret.txt#" has a query or a fragment`},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:9/?token=x'}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8/v1'}]\n", `trainer.url: "http://127.0.0.1:9/?token=x" has a query or a fragment`},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:9/'}\ninference:\n  endpoints: [{url: 'http://user:s3cret@127.0.0.1:8/v1'}]\n", `inference.endpoints[0].url: http://user:xxxxx@127.0.0.1:8/v1 carries credentials (user:password@): give the key in api_key_env instead`},
		{"trainer: {kind: jobs}\ninference:\n  endpoints: [{url: 'https://127.0.0.1/v1', api_key_env: 'MY-KEY'}]\n", `inference.endpoints[0].api_key_env: "MY-KEY" is not an environment variable name`},
		{"trainer: {kind: jobs}\ninference:\n  endpoints: [{url: 'https://127.0.0.1/v1', api_key_env: VLLM_KEY_2}]\n", ""},
		{"trainer: {kind: art, url: 'http://127.0.0.1:7999'}", ""},
		{"trainer: {kind: art, url: '127.0.0.1:7999'}", `trainer.url: "127.0.0.1:7999" is not an http(s) URL such as http://127.0.0.1:8000/v1; trainer.kind art needs the address of ART's backend server`},
		{"trainer: {kind: art}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "inference.endpoints: set, but trainer.kind art samples only from the vLLM server ART starts"},
		{"trainer: {kind: art}\ninference: {adapters: {naming: inplace}}\n", `inference.adapters.naming: "inplace" is not accepted with trainer.kind art: ART names the adapters it serves itself; accepted: per-step`},
		{"trainer: {kind: art, hyperparameters: {epochs: 2}}", "trainer.hyperparameters.epochs: is 2; trainer.kind art accepts only 1"},
		{"trainer: {kind: art, lora: {alpha: 16.5}}", "trainer.lora.alpha: is 16.5; trainer.kind art needs a whole number"},
		{"trainer: {kind: art, lora: {alpha: 32}}", ""},
		{"trainer: {kind: art, lora: {rank: 0}}", "trainer.lora.rank: is 0; accepted: 1 to 64"},
		{"trainer: {lora: {alpha: 16.5}}", ""},
		{"trainer: {kind: torch}", `trainer.kind: "torch" is not accepted; accepted: embedded, jobs, art`},
		{"trainer: {kind: jobs}", "inference.endpoints: empty, but trainer.kind jobs needs inference servers"},
		{"inference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "inference.endpoints: set, but trainer.kind is embedded"},
		{"trainer: {kind: jobs, url: ''}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", `trainer.url: "" is not an http(s) URL such as http://127.0.0.1:8000/v1; trainer.kind jobs needs the job API's address`},
		{"trainer: {kind: jobs, base_model: ''}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "trainer.base_model: is empty"},
		{"trainer: {lora: {rank: 0}}", "trainer.lora.rank: is 0; accepted: 1 to 64"},
		{"trainer: {lora: {rank: 65}}", "trainer.lora.rank: is 65; accepted: 1 to 64"},
		{"trainer: {lora: {rank: 64}}", ""},
		{"trainer: {lora: {alpha: 0}}", "trainer.lora.alpha: is 0; need a number > 0"},
		{"trainer: {lora: {target_modules: [q_proj, '']}}", "trainer.lora.target_modules[1]: is empty"},
		{"trainer: {hyperparameters: {learning_rate: 0}}", "trainer.hyperparameters.learning_rate: is 0; need a number > 0"},
		{"trainer: {hyperparameters: {learning_rate: .inf}}", "trainer.hyperparameters.learning_rate: is +Inf; need a number > 0"},
		{"trainer: {hyperparameters: {epsilon: 0}}", "trainer.hyperparameters.epsilon: is 0; accepted: 0 < epsilon < 1"},
		{"trainer: {hyperparameters: {epsilon: 1}}", "trainer.hyperparameters.epsilon: is 1; accepted: 0 < epsilon < 1 (the ratio's lower clip is 1 - epsilon; the reference trainer refuses more)"},
		{"trainer: {hyperparameters: {epsilon: 0.99}}", ""},
		{"trainer: {hyperparameters: {epsilon_high: -0.2}}", "trainer.hyperparameters.epsilon_high: is -0.2; need a number >= 0 (0: same as epsilon)"},
		{"trainer: {hyperparameters: {epsilon_high: 0}}", ""},
		{"trainer: {hyperparameters: {kl_beta: -1}}", "trainer.hyperparameters.kl_beta: is -1; need a number >= 0"},
		{"trainer: {hyperparameters: {epochs: 0}}", "trainer.hyperparameters.epochs: is 0; accepted: 1 to 1000"},
		{"trainer: {hyperparameters: {epochs: 1000000000}}", "trainer.hyperparameters.epochs: is 1000000000; accepted: 1 to 1000 (the reference trainers refuse more)"},
		{"trainer: {hyperparameters: {epochs: 1000}}", ""},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {mini_batches: 4, warmup_steps: 10, reset_optimizer: true}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", ""},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {mini_batches: 1000, warmup_steps: 1000000}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", ""},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {mini_batches: 0}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "trainer.hyperparameters.mini_batches: is 0; accepted: 1 to 1000 (optimizer steps per epoch over a step's trajectories; 1: one step on them all)"},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {mini_batches: 1001}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "trainer.hyperparameters.mini_batches: is 1001; accepted: 1 to 1000"},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {warmup_steps: -1}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "trainer.hyperparameters.warmup_steps: is -1; accepted: 0 (no warm-up) to 1000000 optimizer steps"},
		{"trainer: {kind: jobs, url: 'http://127.0.0.1:7000', hyperparameters: {warmup_steps: 1000001}}\ninference:\n  endpoints: [{url: 'http://127.0.0.1:8000/v1'}]\n", "trainer.hyperparameters.warmup_steps: is 1000001; accepted: 0 (no warm-up) to 1000000"},
		{"trainer: {hyperparameters: {mini_batches: 2}}", "trainer.hyperparameters.mini_batches: is 2; trainer.kind embedded accepts only 1 (the embedded trainer takes full-batch gradient steps and keeps no optimizer state); the job API's trainers (trainer.kind jobs) take more"},
		{"trainer: {hyperparameters: {warmup_steps: 5}}", "trainer.hyperparameters.warmup_steps: is 5; trainer.kind embedded accepts only 0"},
		{"trainer: {hyperparameters: {reset_optimizer: true}}", "trainer.hyperparameters.reset_optimizer: is true; trainer.kind embedded accepts only false"},
		{"trainer: {hyperparameters: {mini_batches: 1, warmup_steps: 0, reset_optimizer: false}}", ""},
		{"trainer: {kind: art, hyperparameters: {mini_batches: 2}}", "trainer.hyperparameters.mini_batches: is 2; trainer.kind art accepts only 1 (grpo does not send it to ART, which keeps its own optimizer)"},
		{"trainer: {kind: art, hyperparameters: {reset_optimizer: true}}", "trainer.hyperparameters.reset_optimizer: is true; trainer.kind art accepts only false"},
		{"trainer: {job_timeout: 0}", "trainer.job_timeout: is 0s; need a duration > 0 such as 30m"},
		{"trainer: {base_coordination: -0.7}", ""},
		{"trainer: {base_coordination: 1}", ""},
		{"trainer: {base_coordination: -1}", ""},
		{"trainer: {base_coordination: 1.5}", "trainer.base_coordination: is 1.5; accepted: -1 to 1 (0: the default base; below 0 coordinates worse, above 0 better)"},
		{"trainer: {base_coordination: -1.01}", "trainer.base_coordination: is -1.01; accepted: -1 to 1"},
		{"trainer: {base_coordination: .nan}", "trainer.base_coordination: is NaN; accepted: -1 to 1"},
		{strings.Replace(jobs, "kind: jobs,", "kind: jobs, base_coordination: 0.5,", 1), "trainer.base_coordination: is 0.5, but the run does not use the embedded backend (trainer.kind jobs)"},
		{strings.Replace(jobs, "kind: jobs,", "kind: jobs, base_coordination: 0,", 1), ""},
		{"validation: {every: 0}", "validation.every: is 0; need at least 1"},
		{"validation: {n: []}", "validation.n: is empty; give at least one table size"},
		{"validation: {n: [5, 1]}", "validation.n[1]: is 1; need at least 2 philosophers"},
		{"validation: {n: [5, 10, 5]}", "validation.n[2]: is 5, as validation.n[0] is; list each table size once"},
		{"validation: {episodes: 1}", "validation.episodes: is 1; need at least 2"},
		{"validation: {temperature: -1}", "validation.temperature: is -1; need a number >= 0"},
		{"validation: {metric: accuracy}", `validation.metric: "accuracy" is not accepted; accepted: reward_mean, meals_mean, deadlock_rate`},
		{"validation: {metric: deadlock_rate}", ""},
		{"validation: {selection: first}", `validation.selection: "first" is not accepted; accepted: best-validation, best-train, last`},
		{"validation: {selection: last}", ""},
		{"validation: {ema: 1}", "validation.ema: is 1; accepted: 0 <= ema < 1"},
		{"validation: {ema: -0.1}", "validation.ema: is -0.1; accepted: 0 <= ema < 1"},
		{"validation: {ema: .nan}", "validation.ema: is NaN; accepted: 0 <= ema < 1"},
		{"validation: {transcripts: -1}", "validation.transcripts: is -1; accepted: 0 to validation.episodes (24)"},
		{"validation: {episodes: 4, transcripts: 5}", "validation.transcripts: is 5; accepted: 0 to validation.episodes (4)"},
		{"validation: {ema: 0.9}", ""},
		{"curriculum: {schedule: '5@0,10@6,15@11'}", ""},
		{"curriculum: {schedule: '5@2'}", `curriculum.schedule: stage "5@2": the first stage must start at step 0 or 1`},
		{"curriculum: {schedule: '5@0', promote: {sizes: [5, 10], threshold: 0.5}}", "curriculum.promote: set together with curriculum.schedule; use one of them"},
		{"curriculum: {promote: {sizes: [5, 10]}}", "curriculum.promote.threshold: is 0; set the finite, non-zero value of reward_mean that promotes"},
		{"curriculum: {promote: {threshold: 0.5}}", "curriculum.promote.sizes: is empty, but curriculum.promote.threshold is set"},
		{"curriculum: {promote: {sizes: [5, 1], threshold: 0.5}}", "curriculum.promote.sizes[1]: is 1; need at least 2 philosophers"},
		{"curriculum: {promote: {sizes: [5, 10, 10], threshold: 0.5}}", "curriculum.promote.sizes[2]: is 10, as curriculum.promote.sizes[1] is; list each table size once"},
		{"curriculum: {promote: {sizes: [5, 10, 15], threshold: 0.5}}", ""},
		{"inference: {chat_template_kwargs: {1: {2: x}}}", "inference.chat_template_kwargs: cannot be sent as JSON"},
	} {
		// Parse refuses a name a key does not accept itself (TestEnums);
		// every other bad value is Validate's.
		c, err := config.Parse([]byte(tt.in))
		if err == nil {
			err = c.Validate()
		}
		if tt.want == "" {
			if err != nil {
				t.Errorf("Validate(%q)=%v, want nil", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%q)=%v, want an error containing %q", tt.in, err, tt.want)
			continue
		}
		var cerr *config.Error
		if !errors.As(err, &cerr) || !strings.HasPrefix(tt.want, cerr.Key+": ") {
			t.Errorf("Validate(%q)=%#v, want a *config.Error with the key of %q", tt.in, err, tt.want)
		}
	}
}

func TestValidate_Seeds(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"test: {n: [5, 1]}", "test.n[1]: is 1; need at least 2 philosophers"},
		{"test: {n: [5, 5]}", "test.n[1]: is 5, as test.n[0] is; list each table size once"},
		{"test: {episodes: 1}", "test.episodes: is 1; need at least 2"},
		// validation 1000000..1000023 (24 episodes), test 999990..1000089.
		{"test: {seed: 999990}", "test.seed: is 999990, so test tables 999990..1000089 overlap validation tables 1000000..1000023 (validation.seed, validation.episodes); move one of the seeds"},
		{"test: {seed: 1000023, episodes: 2}", "test.seed: is 1000023, so test tables 1000023..1000024 overlap validation tables 1000000..1000023"},
	} {
		c := mustParse(t, tt.in)
		if got := errString(c.Validate()); !strings.Contains(got, tt.want) {
			t.Errorf("Validate(%q)=%q, want it to contain %q", tt.in, got, tt.want)
		}
	}
	// Adjacent ranges are fine, and so are seeds near the top of int64.
	for _, in := range []string{"test: {seed: 1000024, episodes: 2}", "test: {seed: 999998, episodes: 2}",
		"test: {seed: 9223372036854775807}", "run: {seed: -5}\nvalidation: {seed: 0}"} {
		if err := mustParse(t, in).Validate(); err != nil {
			t.Errorf("Validate(%q): %v", in, err)
		}
	}
	c := config.Default()
	c.Test.N = []int{5, 10}
	if err := c.Validate(); err != nil || !c.Test.Set() {
		t.Fatalf("Validate() with test.n [5 10]: %v, Set()=%v", err, c.Test.Set())
	}
	if config.Default().Test.Set() {
		t.Error("the default config has a test split; want none until test.n is given")
	}
}

func TestTrainSeed(t *testing.T) {
	// The published SplitMix64 vector: state 1234567 gives
	// 6457827717110365317 then 3203168211198807973.
	if got := splitmixRef(1234567); got != 6457827717110365317 {
		t.Fatalf("splitmixRef(1234567)=%d, want 6457827717110365317", got)
	}
	if got := splitmixRef(1234567 + 0x9e3779b97f4a7c15); got != 3203168211198807973 {
		t.Fatalf("second SplitMix64 output=%d, want 3203168211198807973", got)
	}
	c := config.Default() // run.seed 1
	// Hand-computed: splitmix64(splitmix64(splitmix64(1) ^ 1) ^ 0) >> 11.
	if got, want := c.TrainSeed(1, 0), int64(splitmixRef(splitmixRef(splitmixRef(1)^1)^0)>>11); got != want {
		t.Errorf("TrainSeed(1, 0)=%d, want %d", got, want)
	}
	seen := map[int64]string{}
	for _, seed := range []int64{1, 2, 7} {
		c.Run.Seed = seed
		for step := 1; step <= 50; step++ {
			for slot := 0; slot < 6; slot++ {
				s := c.TrainSeed(step, slot)
				if s < 0 || s >= 1<<53 {
					t.Fatalf("TrainSeed(%d, %d) with run.seed %d = %d, want in [0, 2^53)", step, slot, seed, s)
				}
				at := fmt.Sprintf("run.seed %d step %d slot %d", seed, step, slot)
				if prev, ok := seen[s]; ok {
					// The old scheme replayed run.seed 1's step 2 as
					// run.seed 7's step 1: no seed may repeat.
					t.Fatalf("%s draws %d, already drawn by %s", at, s, prev)
				}
				seen[s] = at
				if c.TrainSeed(step, slot) != s {
					t.Fatalf("%s: TrainSeed is not a function of its arguments", at)
				}
			}
		}
	}
	if got, want := c.ValidationSeed(0), int64(1000000); got != want {
		t.Errorf("ValidationSeed(0)=%d, want %d", got, want)
	}
	if got, want := c.ValidationSeed(23), int64(1000023); got != want {
		t.Errorf("ValidationSeed(23)=%d, want %d", got, want)
	}
	if got, want := c.TestSeed(99), int64(2000099); got != want {
		t.Errorf("TestSeed(99)=%d, want %d", got, want)
	}
}

// TestTrainSeed_AvoidsReserved puts the validation and test ranges over the
// very seeds TrainSeed would draw and checks that it draws others.
func TestTrainSeed_AvoidsReserved(t *testing.T) {
	c := config.Default()
	first := c.TrainSeed(1, 0)
	second := c.TrainSeed(1, 1)
	c.Validation.Seed = first - 5
	c.Test.Seed = second
	a, b := c.TrainSeed(1, 0), c.TrainSeed(1, 1)
	for _, s := range []int64{a, b} {
		if (s >= c.Validation.Seed && s < c.Validation.Seed+config.ReservedSpan) || (s >= c.Test.Seed && s < c.Test.Seed+config.ReservedSpan) {
			t.Fatalf("TrainSeed drew %d, inside a reserved range (validation from %d, test from %d)", s, c.Validation.Seed, c.Test.Seed)
		}
	}
	// Hand-computed: the redraw is splitmix64 of the rejected 64-bit value.
	x := splitmixRef(splitmixRef(splitmixRef(1)^1) ^ 0)
	if want := int64(splitmixRef(x) >> 11); a != want {
		t.Errorf("redrawn TrainSeed(1, 0)=%d, want %d", a, want)
	}
}

// splitmixRef is SplitMix64's mix, written out from the reference
// (Steele, Lea and Flood 2014) for the tests.
func splitmixRef(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func TestError(t *testing.T) {
	for _, tt := range []struct {
		err  config.Error
		want string
	}{
		{config.Error{File: "a.yaml", Line: 3, Column: 5, Key: "env.n", Msg: "bad"}, "a.yaml:3:5: env.n: bad"},
		{config.Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{config.Error{File: "a.yaml", Key: "env.n", Msg: "bad"}, "a.yaml: env.n: bad"},
		{config.Error{Line: 3, Column: 5, Key: "env.n", Msg: "bad"}, "line 3, column 5: env.n: bad"},
		{config.Error{Line: 3, Msg: "bad"}, "line 3: bad"},
		{config.Error{Key: "env.n", Msg: "bad"}, "env.n: bad"},
	} {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error()=%q, want %q", got, tt.want)
		}
	}
}

func TestValidate_MaxEndpoints(t *testing.T) {
	endpoints := func(n int) string {
		var b strings.Builder
		b.WriteString("trainer: {kind: jobs, url: 'http://127.0.0.1:7000'}\ninference:\n  endpoints:\n")
		for i := range n {
			fmt.Fprintf(&b, "  - {url: 'http://127.0.0.1:%d/v1'}\n", 8000+i)
		}
		return b.String()
	}
	if err := mustParse(t, endpoints(config.MaxEndpoints)).Validate(); err != nil {
		t.Fatalf("%d endpoints: %v, want valid", config.MaxEndpoints, err)
	}
	err := mustParse(t, endpoints(config.MaxEndpoints+1)).Validate()
	if got, want := fmt.Sprint(err), "inference.endpoints: lists 257 endpoints; at most 256"; !strings.Contains(got, want) {
		t.Fatalf("257 endpoints: %v, want an error containing %q", got, want)
	}
}

// TestEnums: a value a key does not accept is refused at its line and
// column, with the nearest accepted name when it is a likely typo, as an
// unknown key is; Validate refuses it too in a config built in code.
func TestEnums(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ doc, want string }{
		{"env:\n  mode: simultanous\n", `run.yaml:2:9: env.mode: "simultanous" is not accepted (did you mean simultaneous?); accepted: simultaneous, sequential`},
		{"env:\n  mode: diagonal\n", `run.yaml:2:9: env.mode: "diagonal" is not accepted; accepted: simultaneous, sequential`},
		{"reward: {function: shapd}\n", `run.yaml:1:20: reward.function: "shapd" is not accepted (did you mean shaped?); accepted: shaped, paper`},
		{"trainer:\n  kind: Jobs\n", `run.yaml:2:9: trainer.kind: "Jobs" is not accepted (did you mean jobs?); accepted: embedded, jobs, art`},
		{"grpo:\n  advantage:\n    baseline: leave_one_out\n", `run.yaml:3:15: grpo.advantage.baseline: "leave_one_out" is not accepted (did you mean leave-one-out?); accepted: mean, leave-one-out`},
		{"grpo: {advantage: {std: unbaised}}\n", `run.yaml:1:25: grpo.advantage.std: "unbaised" is not accepted (did you mean unbiased?); accepted: population, unbiased`},
		{"inference: {adapters: {naming: per_step}}\n", `run.yaml:1:32: inference.adapters.naming: "per_step" is not accepted (did you mean per-step?); accepted: per-step, inplace`},
		{"inference: {adapters: {inplace: reloaded}}\n", `run.yaml:1:33: inference.adapters.inplace: "reloaded" is not accepted (did you mean reload?); accepted: auto, load_inplace, reload`},
		{"validation:\n  metric: reward\n  selection: best\n", `run.yaml:2:11: validation.metric: "reward" is not accepted; accepted: reward_mean, meals_mean, deadlock_rate`},
		{"validation:\n  selection: best_validation\n", `run.yaml:2:14: validation.selection: "best_validation" is not accepted (did you mean best-validation?); accepted: best-validation, best-train, last`},
	} {
		file := filepath.Join(dir, "run.yaml")
		if err := os.WriteFile(file, []byte(tt.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(file)
		if got, want := errString(err), filepath.Join(dir, tt.want); got != want {
			t.Errorf("Load(%q)=%q\nwant %q", tt.doc, got, want)
		}
	}
	c := config.Default()
	c.Env.Mode = "diagonal"
	if got, want := errString(c.Validate()), `env.mode: "diagonal" is not accepted; accepted: simultaneous, sequential`; got != want {
		t.Errorf("Validate()=%q, want %q", got, want)
	}
}
