package experiment

import (
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestTestPlotPanels: arms scored by different reward functions get a
// reward panel each (a paper reward is not on the shaped scale), in
// curves.png and test.png, and test.png shows every arm's deadlock rate
// and meals beside them. Each seed of an arm has the same value, so each
// panel's data range is its arms' values exactly; but for shaped's
// deadlock rates, 0.25 and 0.75, whose 95% CI over two seeds (0.5 ±
// 12.706 * 0.3536 / 1.414) is cut to the rate's range [0, 1].
func TestTestPlotPanels(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "e.yaml")
	os.WriteFile(file, []byte(`experiment: {name: panels, seeds: [1, 2]}
arms:
  - {name: shaped, set: {reward: {function: shaped}}}
  - {name: paper, set: {reward: {function: paper}}}
  - {name: shaped2, set: {reward: {function: shaped}, grpo: {groups: 1}}}
test: {n: [5], episodes: 2, steps: [best]}
`), 0o644)
	f, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := f.rewardGroups()
	if err != nil {
		t.Fatal(err)
	}
	if want := []rewardGroup{{"shaped reward", []string{"shaped", "shaped2"}}, {"paper reward", []string{"paper"}}}; !reflect.DeepEqual(groups, want) {
		t.Fatalf("reward groups %+v, want %+v", groups, want)
	}
	cells := map[string]TestCell{
		"shaped":  {RewardMean: -0.1, DeadlockRate: 0.5, MealsMean: 2},
		"paper":   {RewardMean: 1.0, DeadlockRate: 0.75, MealsMean: 4},
		"shaped2": {RewardMean: 0.2, DeadlockRate: 0.25, MealsMean: 6},
	}
	var s Summary
	var results []RunResult
	for _, a := range f.Arms {
		arm := ArmSummary{Name: a.Name}
		for _, seed := range f.Seeds {
			c := cells[a.Name]
			if a.Name == "shaped" {
				c.DeadlockRate = map[int64]float64{1: 0.25, 2: 0.75}[seed]
			}
			arm.Runs = append(arm.Runs, RunSummary{Seed: seed, Test: map[string]map[string]TestCell{"best": {"5": c}}})
			results = append(results, RunResult{Arm: a.Name, Seed: seed, BestStep: 1, LastStep: 1, Validation: map[int]float64{0: 0, 1: cells[a.Name].RewardMean}})
		}
		s.Arms = append(s.Arms, arm)
	}
	panels, err := f.testPanels(s, groups)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		title  string
		lo, hi float64
	}{
		{"test shaped reward", -0.1, 0.2}, // shaped and shaped2, not paper's 1.0
		{"test paper reward", 1.0, 1.0},
		{"test deadlock rate", 0, 1},
		{"test meals per episode", 2, 6},
	}
	if len(panels) != len(want) {
		t.Fatalf("%d panels, want %d", len(panels), len(want))
	}
	for i, p := range panels {
		w := want[i]
		if !strings.Contains(p.Title.Text, w.title) || p.Y.Min != w.lo || p.Y.Max != w.hi {
			t.Errorf("panel %d: %q over [%v, %v]; want %q over [%v, %v]", i, p.Title.Text, p.Y.Min, p.Y.Max, w.title, w.lo, w.hi)
		}
	}
	if _, err := f.WritePlots(dir, s, results); err != nil {
		t.Fatal(err)
	}
	// 3.5 in panels at the PNG canvas's 96 dpi: test.png holds four,
	// curves.png two (one per reward function).
	for name, panels := range map[string]int{"test.png": 4, "curves.png": 2} {
		fh, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := img.Bounds().Dy(), panels*336; got != want {
			t.Errorf("%s is %d px high, want %d (%d panels)", name, got, want, panels)
		}
	}
}
