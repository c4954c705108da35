package main

import (
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

// TestBadNumericFlags: an explicit zero or negative count, or a
// non-positive timeout, is refused (exit 2) with a message naming the
// flag and what it accepts, before anything runs.
func TestBadNumericFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--steps", "0"}, "--steps 0: need at least 1"},
		{[]string{"run", "--steps", "-3"}, "--steps -3: need at least 1"},
		{[]string{"run", "--resume", "r", "--seed", "0"}, "--resume uses the run's stored config"},
		{[]string{"run", "--resume", "r", "--steps", "0"}, "--steps 0: need at least 1"},
		{[]string{"run", "--retry-job"}, "--retry-job retries a stored run's trainer job: use it with --resume RUN"},
		{[]string{"eval", "--episodes", "0"}, "--episodes 0: need at least 1"},
		{[]string{"eval", "--episodes", "-1"}, "--episodes -1: need at least 1"},
		{[]string{"eval", "--rounds", "0"}, "--rounds 0: need at least 1"},
		{[]string{"eval", "--deadlock-patience", "-2"}, "--deadlock-patience -2: need at least 1"},
		{[]string{"eval", "--max-tokens", "-5"}, "--max-tokens -5: need at least 1"},
		{[]string{"eval", "--max-tokens", "0"}, "--max-tokens 0: need at least 1"},
		{[]string{"eval", "--concurrency", "0"}, "--concurrency 0: need at least 1"},
		{[]string{"eval", "--retries", "-1"}, "--retries -1: need 0 or more"},
		{[]string{"eval", "--episode-replays", "-1"}, "--episode-replays -1: need 0 or more"},
		{[]string{"eval", "--request-timeout", "-1s"}, "--request-timeout -1s: need a duration > 0 such as 60s"},
		{[]string{"eval", "--request-timeout", "0s"}, "--request-timeout 0s: need a duration > 0 such as 60s"},
		{[]string{"eval", "--max-record-bytes", "0"}, "--max-record-bytes 0: need at least 1"},
		{[]string{"eval", "--max-out-bytes", "-1"}, "--max-out-bytes -1: need at least 1"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--retries", "-1"}, "--retries -1: need 0 or more"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--request-timeout", "0s"}, "--request-timeout 0s: need a duration > 0 such as 60s"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--concurrency", "0"}, "--concurrency 0: need at least 1"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--max-out-bytes", "0"}, "--max-out-bytes 0: need at least 1"},
		{[]string{"eval", "--concurrency", "2000000"}, "--concurrency 2000000: at most 100000 requests in flight"},
		{[]string{"eval", "--max-tokens", "1000000000"}, "--max-tokens 1000000000: at most 16777216 tokens"},
		{[]string{"eval", "--retries", "101"}, "--retries 101: at most 100 ("},
		{[]string{"eval", "--episode-replays", "11"}, "--episode-replays 11: at most 10 ("},
		{[]string{"eval", "--outage-window", "25h"}, "--outage-window 25h0m0s: at most 24h ("},
		{[]string{"eval", "--outage-window", "-1s"}, "--outage-window -1s: need 0 (fail at once)"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--concurrency", "100001"}, "--concurrency 100001: at most 100000"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--retries", "1000"}, "--retries 1000: at most 100"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--outage-window", "48h"}, "--outage-window 48h0m0s: at most 24h"},
		{[]string{"eval", "--request-timeout", "25h"}, "--request-timeout 25h0m0s: at most 24h (one attempt of one request"},
		{[]string{"eval", "--retry-budget", "1000h"}, "--retry-budget 1000h0m0s: at most 24h (with an endpoint failing every request for a day"},
		{[]string{"eval", "--retry-budget", "-1s"}, "--retry-budget -1s: need 0 (drain a failing endpoint at once: retries alone bound a request)"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--request-timeout", "24h0m1s"}, "--request-timeout 24h0m1s: at most 24h"},
		{[]string{"eval", "--db", "x.db", "--run", "r", "--retry-budget", "48h"}, "--retry-budget 48h0m0s: at most 24h"},
		{[]string{"serve", "--max-runs", "0"}, "--max-runs 0: need at least 1"},
		{[]string{"serve", "--max-conns", "0"}, "--max-conns 0: need at least 1"},
		{[]string{"serve", "--max-conns", "1024"}, "--max-conns 1024: need more than --max-streams 1024, or the websocket streams could hold every connection"},
		{[]string{"serve", "--max-streams", "5000"}, "--max-conns 4096: need more than --max-streams 5000"},
		{[]string{"bench", "--steps", "0"}, "--steps and --curve must be at least 1"},
		{[]string{"serve", "--addr", "nonsense"}, `--addr "nonsense": want HOST:PORT`},
		{[]string{"runs", "show", "a", "b"}, `runs show takes one run name: unexpected argument "b"`},
	} {
		code, out, errs := cli(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("grpo %v: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, errs, c.want)
		}
		if out != "" {
			t.Errorf("grpo %v wrote %q on stdout", c.args, out)
		}
	}
}

// TestRunSeedAndStepsGiven: --seed 0 is a seed like any other (it used
// to be taken as "unset" and silently replaced by run.seed); a flag left
// out keeps the config's value.
func TestRunSeedAndStepsGiven(t *testing.T) {
	m := &Main{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, Getenv: func(string) string { return "" }}
	for _, c := range []struct {
		args  []string
		steps int
		seed  int64
	}{
		{nil, 16, 1},
		{[]string{"--seed", "0"}, 16, 0},
		{[]string{"--seed", "-7", "--steps", "3"}, 3, -7},
		{[]string{"--steps", "1"}, 1, 1},
	} {
		var rc runCommand
		if err := rc.parse(m, c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		cfg := config.Default()
		cfg.Run.Steps, cfg.Run.Seed = 16, 1
		rc.override(&cfg)
		if cfg.Run.Steps != c.steps || cfg.Run.Seed != c.seed {
			t.Errorf("%v: steps %d seed %d; want %d and %d", c.args, cfg.Run.Steps, cfg.Run.Seed, c.steps, c.seed)
		}
	}
}

// TestRunRetryJobFlag: --retry-job with --resume asks the run for a retry
// of an ended job; without it, a resume does not retry.
func TestRunRetryJobFlag(t *testing.T) {
	m := &Main{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, Getenv: func(string) string { return "" }}
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--resume", "r", "--retry-job"}, true},
		{[]string{"--resume", "r"}, false},
	} {
		var rc runCommand
		if err := rc.parse(m, c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if rc.retryJob != c.want {
			t.Errorf("%v: retryJob %v, want %v", c.args, rc.retryJob, c.want)
		}
	}
}

// TestEvalFlagsBoundedAsKeys: grpo eval's flags that set a run's inference
// keys accept what the keys accept and say the same about the rest (one
// rule, the config package's), at both ends of each range; the largest
// value accepted is accepted by both.
func TestEvalFlagsBoundedAsKeys(t *testing.T) {
	for _, c := range []struct {
		flag, key, yaml string // yaml: the key's mapping inside inference
		values          []string
	}{
		{"concurrency", "inference.concurrency", "concurrency: %s", []string{"0", "100000", "100001", "2000000"}},
		{"max-tokens", "inference.max_tokens", "max_tokens: %s", []string{"0", "16777216", "16777217"}},
		{"retries", "inference.retries", "retries: %s", []string{"-1", "100", "101"}},
		{"episode-replays", "inference.episode_replays", "episode_replays: %s", []string{"-1", "10", "11"}},
		{"outage-window", "inference.outage_window", "outage_window: %s", []string{"-1s", "24h0m0s", "24h0m1s", "100h0m0s"}},
		{"request-timeout", "inference.request_timeout", "request_timeout: %s", []string{"-1s", "0s", "24h0m0s", "24h0m1s"}},
		{"retry-budget", "inference.retry_budget", "retry_budget: %s", []string{"-1s", "0s", "24h0m0s", "24h0m1s"}},
	} {
		for _, v := range c.values {
			var ec EvalCommand
			ec.Main = &Main{Stdout: &strings.Builder{}, Stderr: &strings.Builder{}, Getenv: func(string) string { return "" }}
			flagErr := ec.ParseFlags([]string{"--" + c.flag, v})
			cfg, err := config.Parse([]byte("inference: {" + strings.Replace(c.yaml, "%s", v, 1) + "}"))
			if err != nil {
				t.Fatalf("%s %s: %v", c.key, v, err)
			}
			keyErr := cfg.Validate()
			if (flagErr == nil) != (keyErr == nil) {
				t.Errorf("--%s %s: %v; %s %s: %v; want both accepted or both refused", c.flag, v, flagErr, c.key, v, keyErr)
				continue
			}
			if flagErr == nil {
				continue
			}
			flagMsg, ok1 := strings.CutPrefix(flagErr.Error(), "--"+c.flag+" "+v+": ")
			keyMsg, ok2 := strings.CutPrefix(keyErr.Error(), c.key+": is "+v+"; ")
			if !ok1 || !ok2 || flagMsg != keyMsg {
				t.Errorf("--%s %s says %q; %s %s says %q: want the same", c.flag, v, flagErr, c.key, v, keyErr)
			}
		}
	}
}
