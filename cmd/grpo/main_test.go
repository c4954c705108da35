package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// grpo runs the CLI in-process and returns exit code, stdout, stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := m.Run(context.Background(), args)
	return code, out.String(), errb.String()
}

type evalJSON struct {
	Results []evalResult `json:"results"`
}

func TestEvalJSONOnScriptedPolicy(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	for _, mode := range []string{"simultaneous", "sequential"} {
		code, out, errs := cli(t, "eval", "--base-url", srv.BaseURL(), "--model", "scripted", "--n", "5,10,15", "--episodes", "3", "--mode", mode, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var got evalJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if len(got.Results) != 3 {
			t.Fatalf("%d results, want 3", len(got.Results))
		}
		// Philosophers 0 and 2 eat three meals each, everyone else thinks.
		// n=5: 1.3275 (DESIGN §3). n=10: M=6 of 15 (0.4), meals variance
		// 1.44 over 3.24 (4/9), idle 40/50: 1 + 0.2 - 0.3*4/9 - 0.08.
		// n=15: M=6 of 21, variance (2*(3-0.4)^2+13*0.16)/15 = 1.04 over
		// 36*14/225 = 2.24, idle 65/75: 1 + 0.5*6/21 - 0.3*1.04/2.24 - 0.1*65/75.
		want := map[int]float64{
			5:  1.3275,
			10: 1 + 0.2 - 0.3*4/9 - 0.08,
			15: 1 + 0.5*6/21 - 0.3*1.04/2.24 - 0.1*65/75,
		}
		for _, r := range got.Results {
			if math.Abs(r.Reward.Mean-want[r.N]) > 1e-9 || r.Reward.Std != 0 || r.Episodes != 3 || r.Errored != 0 {
				t.Errorf("%s n=%d: reward %+v episodes %d errored %d, want mean %.6f", mode, r.N, r.Reward, r.Episodes, r.Errored, want[r.N])
			}
			if r.DeadlockRate != 0 || r.MealsMean != 6 || r.InvalidRate != 0 || r.StarvationMean != float64(r.N-2) || r.RewardFn != "shaped" || r.Model != "scripted" {
				t.Errorf("%s n=%d: %+v", mode, r.N, r)
			}
		}
	}
}

func TestEvalTableAndOutFileAndCompare(t *testing.T) {
	good := rollouttest.New(rollouttest.WorkedExample)
	defer good.Close()
	lazy := rollouttest.New(func(s rollout.State) string {
		if s.ID == 0 && s.Round == 1 {
			return "let me think about it" // one invalid output per episode
		}
		return rollout.Think
	})
	defer lazy.Close()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	code, out, errs := cli(t, "eval", "--base-url", lazy.BaseURL(), "--model", "lazy", "--episodes", "4", "--reward", "paper", "--out", a)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// paper: no deadlock 1, idle 24/24 (the invalid output is no action): 0.9.
	if !strings.Contains(out, "lazy") || !strings.Contains(out, "0.900") || !strings.Contains(out, "reward: paper") {
		t.Fatalf("table:\n%s", out)
	}
	if code, _, errs = cli(t, "eval", "--base-url", good.BaseURL(), "--model", "good", "--episodes", "4", "--reward", "paper", "--out", b); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	data, _ := os.ReadFile(a)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d records in --out, want 4", len(lines))
	}
	var rec rollout.Episode
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Spec.Model != "lazy" || rec.Metrics.Invalid != 1 || len(rec.Transcripts) != 5 || rec.Terms.Idle != 1 {
		t.Fatalf("record: model %s invalid %d transcripts %d terms %+v", rec.Spec.Model, rec.Metrics.Invalid, len(rec.Transcripts), rec.Terms)
	}
	code, out, errs = cli(t, "compare", "--json", a, b)
	if code != 0 {
		t.Fatalf("compare exit %d: %s", code, errs)
	}
	var cmp struct{ Comparisons []comparison }
	json.Unmarshal([]byte(out), &cmp)
	if len(cmp.Comparisons) != 1 || math.Abs(cmp.Comparisons[0].Diff-(1.3275-0.9)) > 1e-9 || cmp.Comparisons[0].P != 0 {
		t.Fatalf("comparison %+v", cmp.Comparisons)
	}
}

// TestCompareReferenceValues checks compare against R on the sleep data:
// t.test(extra ~ group, data = sleep) gives t = -1.8608, df = 17.776,
// p-value = 0.07939; Hedges' g (effsize) 0.797 for group 2 vs group 1.
func TestCompareReferenceValues(t *testing.T) {
	g1 := []float64{0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0}
	g2 := []float64{1.9, 0.8, 1.1, 0.1, -0.1, 4.4, 5.5, 1.6, 4.6, 3.4}
	dir := t.TempDir()
	write := func(name, model string, rewards []float64) string {
		var b strings.Builder
		for i, r := range rewards {
			ep := rollout.Episode{Spec: rollout.EpisodeSpec{ID: fmt.Sprint(i), Model: model, Env: rollout.DefaultEnvConfig()}, Reward: r}
			j, _ := json.Marshal(ep)
			b.Write(j)
			b.WriteByte('\n')
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(b.String()), 0o644)
		return p
	}
	a, b := write("a.jsonl", "base", g1), write("b.jsonl", "grpo", g2)
	code, out, errs := cli(t, "compare", "--json", a, b)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var cmp struct{ Comparisons []comparison }
	json.Unmarshal([]byte(out), &cmp)
	c := cmp.Comparisons[0]
	if math.Abs(c.T-1.8608) > 1e-4 || math.Abs(c.DF-17.776) > 1e-3 || math.Abs(c.P-0.07939) > 1e-5 || math.Abs(c.HedgesG-0.797) > 1e-3 || math.Abs(c.Diff-1.58) > 1e-9 {
		t.Fatalf("comparison %+v", c)
	}
	code, out, _ = cli(t, "compare", a, b)
	if code != 0 || !strings.Contains(out, "0.0794") || !strings.Contains(out, "+1.580") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestEvalBadInput(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(404)
		w.Write([]byte("<html>not here</html>"))
	}))
	defer html.Close()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", "--mode", "async"}, 2, `--mode = "async": accepted: simultaneous, sequential`},
		{[]string{"eval", "--n", "5,x"}, 2, `"x" is not a whole number`},
		{[]string{"eval", "--n", "1"}, 2, "--n = 1: need at least 2 philosophers"},
		{[]string{"eval", "--n", "5,10,5"}, 2, `--n "5,10,5" lists 5 twice (each value once)`},
		{[]string{"eval", "--reward", "dense"}, 2, `reward function "dense": accepted: shaped, paper`},
		{[]string{"eval", "--bogus"}, 2, "unknown flag --bogus (see --help for the flags)"},
		{[]string{"eval", "--model", "m"}, 2, "--model needs --base-url"},
		{[]string{"eval", "--base-url", html.URL, "--model", "m"}, 1, html.URL},
		{[]string{"eval", "--models", "/nonexistent.yaml"}, 1, "/nonexistent.yaml"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"compare", "only-one.jsonl"}, 2, "want two files"},
	} {
		code, _, errs := cli(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("grpo %v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
	}
}

func TestEvalModelsFile(t *testing.T) {
	a := rollouttest.New(rollouttest.WorkedExample)
	defer a.Close()
	b := rollouttest.New(func(rollout.State) string { return rollout.PickUpLeft })
	defer b.Close()
	path := filepath.Join(t.TempDir(), "models.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf("- {name: alpha, url: %s}\n- {name: beta, url: %s, api_key_env: BETA_KEY}\n", a.BaseURL(), b.BaseURL())), 0o644)
	code, out, errs := cli(t, "eval", "--models", path, "--episodes", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got evalJSON
	json.Unmarshal([]byte(out), &got)
	if len(got.Results) != 2 || got.Results[0].Model != "alpha" || got.Results[1].Model != "beta" ||
		got.Results[1].DeadlockRate != 1 || got.Results[1].Reward.Mean != 0 {
		t.Fatalf("results %+v", got.Results)
	}
	// BETA_KEY is not set: said, not silently sent without a key.
	if !strings.Contains(errs, "WARNING: model beta: $BETA_KEY (its api_key_env) is not set") || strings.Contains(errs, "model alpha") {
		t.Fatalf("stderr %q: want one warning, for beta's unset key", errs)
	}

	// A field the file may not have is named without Go's type names; two
	// entries that could not be told apart are refused.
	for body, want := range map[string]string{
		fmt.Sprintf("- {name: alpha, url: %s, foo: 1}\n", a.BaseURL()):                                "line 1: field foo not found (want a YAML list of {name, url,",
		fmt.Sprintf("- {name: alpha, url: %s}\n- {name: alpha, url: %s}\n", a.BaseURL(), a.BaseURL()): "entries 1 and 2 are both alpha at " + a.BaseURL(),
	} {
		os.WriteFile(path, []byte(body), 0o644)
		code, _, errs := cli(t, "eval", "--models", path, "--episodes", "2")
		if code == 0 || !strings.Contains(errs, want) || strings.Contains(errs, "main.") {
			t.Errorf("models file %q: exit %d, stderr %q; want a refusal containing %q", body, code, errs, want)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, cmd := range []string{"eval", "compare", "run", "runs", "best", "refmodel", "serve", "watch", "version"} {
		code, out, _ := cli(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, "Usage: grpo "+cmd) {
			t.Errorf("grpo %s --help: exit %d\n%s", cmd, code, out)
		}
	}
	code, out, _ := cli(t, "--help")
	if code != 0 || !strings.Contains(out, "Commands:") {
		t.Fatalf("grpo --help: %d %s", code, out)
	}
	if code, out, _ := cli(t, "version"); code != 0 || !strings.HasPrefix(out, "grpo ") {
		t.Fatalf("version: %d %q", code, out)
	}
}
