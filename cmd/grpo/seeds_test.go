package main

import (
	"encoding/json"
	"fmt"
	"math"
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
		if strings.HasPrefix(l, "run ") || strings.HasPrefix(l, "finished in") || strings.HasPrefix(l, "(selection-biased") {
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
	strip := func(s string) string { return strings.ReplaceAll(s, "a-much-longer-name.", "alpha.") }
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

// TestRunStoresEpisodesAndPerN: with several validation sizes, the
// end-of-run table and 'runs show' have a column per size, and the store
// keeps every validation episode, from which the printed figures are
// recomputed.
func TestRunStoresEpisodesAndPerN(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("run: {name: pn, steps: 1, seed: 2}\nvalidation: {episodes: 4, n: [5, 7]}\n"), 0o644)
	db := filepath.Join(dir, "x.db")
	code, out, errs := cli(t, "run", "--config", cfg, "--db", db)
	if code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	code, shown, _ := cli(t, "runs", "show", "pn", "--db", db)
	if code != 0 || stepTable(t, shown) != stepTable(t, out) {
		t.Fatalf("runs show prints another table than run:\n%s\n---\n%s", shown, out)
	}
	if !strings.Contains(out, "VAL n=5") || !strings.Contains(out, "VAL n=7") || !strings.Contains(out, "selection-biased") {
		t.Fatalf("run output lacks per-n columns or the selection-bias note:\n%s", out)
	}
	code, js, _ := cli(t, "runs", "show", "pn", "--db", db, "--json")
	var s struct {
		Steps []struct {
			Step       int `json:"step"`
			Validation struct {
				RewardMean float64 `json:"reward_mean"`
				PerN       []struct {
					N          int     `json:"n"`
					RewardMean float64 `json:"reward_mean"`
				} `json:"per_n"`
				Records []struct {
					N      int     `json:"n"`
					Seed   int64   `json:"seed"`
					Reward float64 `json:"reward"`
					Terms  struct {
						ND   float64 `json:"r_nd"`
						Thru float64 `json:"r_thru"`
						Fair float64 `json:"r_fair"`
						Idle float64 `json:"r_idle"`
					} `json:"terms"`
				} `json:"records"`
			} `json:"validation"`
		} `json:"steps"`
	}
	if code != 0 || json.Unmarshal([]byte(js), &s) != nil || len(s.Steps) != 2 {
		t.Fatalf("runs show --json: %d %s", code, js)
	}
	lines := strings.Split(out, "\n")
	for _, st := range s.Steps {
		v := st.Validation
		if len(v.Records) != 8 {
			t.Fatalf("step %d stores %d validation episodes, want 8", st.Step, len(v.Records))
		}
		sum, byN := 0.0, map[int]float64{}
		for i, r := range v.Records {
			// Play order: n=5 tables 1000000..1000003, then n=7 the same.
			wantN, wantSeed := []int{5, 7}[i/4], int64(1000000+i%4)
			if r.N != wantN || r.Seed != wantSeed {
				t.Fatalf("step %d record %d: n %d seed %d, want n %d seed %d", st.Step, i, r.N, r.Seed, wantN, wantSeed)
			}
			// shaped reward: 1*r_nd + 0.5*r_thru - 0.3*r_fair - 0.1*r_idle.
			if got := r.Terms.ND + 0.5*r.Terms.Thru - 0.3*r.Terms.Fair - 0.1*r.Terms.Idle; math.Abs(got-r.Reward) > 1e-9 {
				t.Fatalf("step %d record %d: terms give %v, reward %v", st.Step, i, got, r.Reward)
			}
			sum += r.Reward
			byN[r.N] += r.Reward / 4
		}
		if math.Abs(sum/8-v.RewardMean) > 1e-9 {
			t.Fatalf("step %d: records average %v, stored mean %v", st.Step, sum/8, v.RewardMean)
		}
		var row string
		for _, l := range lines {
			if strings.HasPrefix(l, fmt.Sprintf("%d ", st.Step)) {
				row = l
			}
		}
		for _, n := range []int{5, 7} {
			if !strings.Contains(row, fmt.Sprintf("%.3f", byN[n])) {
				t.Fatalf("step %d row %q lacks n=%d's mean %.3f recomputed from the records", st.Step, row, n, byN[n])
			}
		}
	}
}
