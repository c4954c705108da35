package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stepTable is the step table 'grpo run' prints, without the lines that
// name the run or its timing.
func stepTable(t *testing.T, out string) string {
	t.Helper()
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "run ") || strings.HasPrefix(l, "finished in") {
			continue
		}
		keep = append(keep, l)
	}
	if len(keep) < 4 || !strings.Contains(out, "STEP") {
		t.Fatalf("no step table in:\n%s", out)
	}
	return strings.Join(keep, "\n")
}

// trainSeeds is every training group's table seed, in step order, from
// 'runs show --json'.
func trainSeeds(t *testing.T, db, run string) []int64 {
	t.Helper()
	code, out, errs := cli(t, "runs", "show", run, "--db", db, "--json")
	var s struct {
		Steps []struct {
			Train *struct {
				Groups []struct {
					Seed int64 `json:"seed"`
				} `json:"groups"`
			} `json:"train"`
		} `json:"steps"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		t.Fatalf("runs show %s: %d %s %s", run, code, out, errs)
	}
	var seeds []int64
	for _, st := range s.Steps {
		if st.Train != nil {
			for _, g := range st.Train.Groups {
				seeds = append(seeds, g.Seed)
			}
		}
	}
	return seeds
}

// TestResultsDependOnConfigAlone: two runs of one config under different
// names (and stores) print the same step table and store the same results;
// another run.seed draws other training tables, not a shifted replay of
// the same ones.
func TestResultsDependOnConfigAlone(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {steps: 3, seed: 2}\nvalidation: {episodes: 8}\n"), 0o644)
	play := func(name, db string, extra ...string) string {
		args := append([]string{"run", "--config", cfg, "--db", filepath.Join(dir, db), "--name", name}, extra...)
		code, out, errs := cli(t, args...)
		if code != 0 {
			t.Fatalf("run %s: exit %d\n%s", name, code, errs)
		}
		return out
	}
	a := play("alpha", "a.db")
	b := play("a-much-longer-name", "b.db")
	if ta, tb := stepTable(t, a), stepTable(t, b); ta != tb {
		t.Fatalf("same config, different names: step tables differ\n%s\n---\n%s", ta, tb)
	}
	ra := results(t, buildBinary(t), filepath.Join(dir, "a.db"), "alpha")
	rb := results(t, buildBinary(t), filepath.Join(dir, "b.db"), "a-much-longer-name")
	// Job ids carry the name; everything else must match.
	strip := func(s string) string { return strings.ReplaceAll(s, "a-much-longer-name/", "alpha/") }
	if ra != strip(rb) {
		t.Fatalf("same config, different names: stored results differ\n%s\n---\n%s", ra, rb)
	}

	play("seed3", "c.db", "--seed", "3")
	s2, s3 := trainSeeds(t, filepath.Join(dir, "a.db"), "alpha"), trainSeeds(t, filepath.Join(dir, "c.db"), "seed3")
	if len(s2) == 0 || len(s3) == 0 {
		t.Fatalf("no training groups: %v %v", s2, s3)
	}
	used := map[int64]bool{}
	for _, s := range s2 {
		used[s] = true
	}
	for _, s := range s3 {
		if used[s] {
			t.Fatalf("run.seed 3 plays training table %d that run.seed 2 played: %v vs %v", s, s3, s2)
		}
		if s >= 1000000 && s < 1000000+24 || s >= 2000000 && s < 2000000+100 {
			t.Fatalf("training seed %d is a validation or test table", s)
		}
	}
}
