package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/server"
)

// storeCurves stores a finished run of two steps whose validations (steps
// 0, 1, 2) have the given deadlock rates and meals.
func storeCurves(t *testing.T, store *checkpoint.Store, name string, deadlock, meals [3]float64) {
	t.Helper()
	cfg := config.Default()
	cfg.Run.Name, cfg.Run.Steps = name, 2
	ctx := context.Background()
	if err := store.CreateRun(ctx, checkpoint.Run{Name: name, Config: cfg.JSON(), Steps: 2, State: checkpoint.StateSucceeded,
		Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricRewardMean}); err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		ev := &checkpoint.Evaluation{Step: step, Episodes: 4, RewardMean: 0.1 * float64(step), DeadlockRate: deadlock[step], MealsMean: meals[step]}
		if err := store.CommitStep(ctx, name, checkpoint.Step{Step: step, N: 5}, ev); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDashboardCompare: /?run=a&compare=b,c opens run a with runs b and c
// overlaid, each in a colour of its own named in the charts' keys, on the
// reward chart and on the deadlock-rate-and-meals chart; unticking c takes
// it out of the address, and a reload shows the comparison the address
// names. A succeeded run's page shows no "retry the trainer job" checkbox
// (its label was display: block, which overrode hidden).
func TestDashboardCompare(t *testing.T) {
	e := newEnv(t)
	storeCurves(t, e.store, "a", [3]float64{1, 0.5, 0}, [3]float64{0, 1, 2})
	storeCurves(t, e.store, "b", [3]float64{0.75, 0.25, 0.5}, [3]float64{3, 4, 5})
	storeCurves(t, e.store, "c", [3]float64{0, 0, 0.25}, [3]float64{6, 7, 8})
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=a&compare=b,c", 1280, 1400)

	const drawn = `document.querySelectorAll('#curve path.other').length === 2 && document.querySelectorAll('#deadlock path.other.meals').length === 2`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](drawn)); err != nil {
		t.Fatalf("chromium: /?run=a&compare=b,c draws no overlay of b and c on both charts: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify((() => {
	  const color = (e) => e.getAttribute('style');
	  const values = (sel) => [...document.querySelectorAll(sel)].map((c) => Number(c.dataset.value));
	  return {
	    reward: [...document.querySelectorAll('#curve path.other')].map(color),
	    dl: [...document.querySelectorAll('#deadlock path.other.dl')].map(color),
	    meals: [...document.querySelectorAll('#deadlock path.other.meals')].map(color),
	    legend: [...document.querySelectorAll('#compare-legend .compared')].map((e) => e.dataset.run + ' ' + e.firstChild.getAttribute('style')),
	    legendDl: [...document.querySelectorAll('#compare-legend-dl .compared')].map((e) => e.dataset.run),
	    dlValues: values('#deadlock circle.pt.other.dl'),
	    mealValues: values('#deadlock circle.pt.other.meals'),
	    ticked: [...document.querySelectorAll('#runs input.compare')].filter((c) => c.checked).map((c) => c.closest('tr').dataset.run),
	    retry: getComputedStyle(document.querySelector('#retry-job-label')).display,
	  };
	})())`))
	if err != nil {
		t.Fatalf("chromium: read the charts: %v", err)
	}
	var m struct {
		Reward, DL, Meals, Legend, LegendDl, Ticked []string
		DlValues, MealValues                        []float64
		Retry                                       string
	}
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Reward) != 2 || m.Reward[0] == m.Reward[1] || m.Reward[0] == "" {
		t.Errorf("the compared runs' reward curves wear %q; want two different colours", m.Reward)
	}
	if !slices.Equal(m.DL, m.Reward) || !slices.Equal(m.Meals, m.Reward) {
		t.Errorf("deadlock curves wear %q and meals curves %q; want each run's reward colour %q", m.DL, m.Meals, m.Reward)
	}
	// The key names each run with its curve's colour (background vs stroke).
	want := []string{"b background: " + m.Reward[0][len("stroke: "):], "c background: " + m.Reward[1][len("stroke: "):]}
	if !slices.Equal(m.Legend, want) || !slices.Equal(m.LegendDl, []string{"b", "c"}) {
		t.Errorf("keys %q and %q; want %q and [b c]", m.Legend, m.LegendDl, want)
	}
	if w := []float64{0.75, 0.25, 0.5, 0, 0, 0.25}; !slices.Equal(m.DlValues, w) {
		t.Errorf("the compared runs' deadlock points read %v; want b's then c's %v", m.DlValues, w)
	}
	if w := []float64{3, 4, 5, 6, 7, 8}; !slices.Equal(m.MealValues, w) {
		t.Errorf("the compared runs' meals points read %v; want b's then c's %v", m.MealValues, w)
	}
	if !slices.Equal(m.Ticked, []string{"b", "c"}) {
		t.Errorf("compare boxes ticked: %q; want b and c, as the address says", m.Ticked)
	}
	if m.Retry != "none" {
		t.Errorf("succeeded run a shows the retry checkbox's label (display %q)", m.Retry)
	}

	// Untick c: the address keeps b only, and a reload shows b only.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#runs tr[data-run="c"] input.compare`))); err != nil {
		t.Fatalf("chromium: untick c: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`location.search === '?run=a&compare=b' && document.querySelectorAll('#curve path.other').length === 1`)); err != nil {
		addr, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.search`))
		t.Fatalf("chromium: after unticking c the address is %q: %v", addr, err)
	}
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatalf("chromium: reload: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelectorAll('#curve path.other').length === 1 && document.querySelector('#compare-legend .compared').dataset.run === 'b' && document.querySelector('#run-name').textContent === 'a'`)); err != nil {
		t.Fatalf("chromium: after a reload of ?run=a&compare=b, run a with b overlaid is not shown: %v", err)
	}
}
