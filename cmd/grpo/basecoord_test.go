package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalBaseCoordination: 'grpo eval --base-coordination' evaluates the
// embedded base at that strength on the same tables: 0 is the default base
// (output identical to no flag), and the deadlock rate falls as the knob
// rises.
func TestEvalBaseCoordination(t *testing.T) {
	eval := func(extra ...string) (string, float64) {
		t.Helper()
		args := append([]string{"eval", "--n", "5", "--episodes", "200", "--seed", "3000000", "--json"}, extra...)
		code, out, errs := cli(t, args...)
		var got evalJSON
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || len(got.Results) != 1 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errs)
		}
		return out, got.Results[0].DeadlockRate
	}
	plain, dl0 := eval()
	zero, _ := eval("--base-coordination", "0")
	if plain != zero {
		t.Fatalf("--base-coordination 0 is not the default base:\n%s\n%s", plain, zero)
	}
	_, weak := eval("--base-coordination", "-1")
	_, strong := eval("--base-coordination", "1")
	if !(weak > dl0 && dl0 > strong) {
		t.Errorf("deadlock rates at -1, 0, 1: %v, %v, %v; want falling", weak, dl0, strong)
	}
}

func TestEvalBaseCoordinationBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--base-coordination", "1.5"}, "--base-coordination 1.5: accepted -1 to 1"},
		{[]string{"--base-coordination", "0.5", "--base-url", "http://127.0.0.1:1/v1", "--model", "m"}, "--base-coordination sets the embedded backend's base; it cannot be combined with --base-url or --models"},
		{[]string{"--base-coordination", "0.5", "--db", "x.db", "--run", "r"}, "--base-coordination cannot be combined with --run"},
	} {
		code, _, errs := cli(t, append([]string{"eval"}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("eval %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
}

func TestRefmodelServe_BaseCoordinationOutOfRange(t *testing.T) {
	code, _, errs := cli(t, "refmodel", "serve", "--base-coordination", "-2")
	if code != 2 || !strings.Contains(errs, "--base-coordination -2: accepted -1 to 1") {
		t.Fatalf("exit %d, stderr %q; want 2 naming --base-coordination", code, errs)
	}
}

// TestRunBaseCoordination: trainer.base_coordination reaches both halves of
// the embedded backend of a run — its adapters record the base (a trainer
// on the default base would write none), the inference server loads them
// (a server on another base refuses them, failing the run) — and 'grpo
// eval --run' serves them again from the run's config.
func TestRunBaseCoordination(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: weak, steps: 2}\ntrainer: {base_coordination: -0.7}\nvalidation: {episodes: 4}\ntest: {n: [5], episodes: 4}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	matches, _ := filepath.Glob(filepath.Join(db+".data", "adapters", "*", "adapter_config.json"))
	if len(matches) == 0 {
		t.Fatalf("no adapters under %s.data", db)
	}
	for _, m := range matches {
		raw, _ := os.ReadFile(m)
		if !strings.Contains(string(raw), `"refmodel_base_coordination": -0.7`) {
			t.Fatalf("%s does not record the run's base:\n%s", m, raw)
		}
	}
	if code, out, errs := cli(t, "eval", "--db", db, "--run", "weak", "--step", "base,last", "--json"); code != 0 || !strings.Contains(out, `"model":"weak@`) {
		t.Fatalf("eval --run: exit %d\n%s\n%s", code, out, errs)
	}
	// The same adapters under a server on the default base are refused.
	if code, _, errs := cli(t, "refmodel", "serve", "--addr", "127.0.0.1:0", "--data-dir", db+".data"); code == 0 || !strings.Contains(errs, "--base-coordination -0.7") {
		t.Fatalf("refmodel serve on the default base: exit %d\n%s", code, errs)
	}
}
