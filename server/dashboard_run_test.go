package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardRunLinkBandsAndTrainer opens /?run=a in headless Chromium
// while a later run b exists (which the page would open by default) and
// checks run a is shown with its validation confidence band, one curve
// per validated table size, and the trainer's loss, KL and grad-norm
// points; keeps a screenshot ($GRPO_ARTIFACTS/dashboard-run.png).
func TestDashboardRunLinkBandsAndTrainer(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	e := newEnv(t)
	const grafana = "http://127.0.0.1:3000/d/grpo"
	s := e.MustStart(t, server.Options{GrafanaURL: grafana})
	for _, cfg := range []string{
		"run: {name: a, steps: 2}\nvalidation: {n: [5, 6], episodes: 4}\n",
		"run: {name: b, steps: 1}\nvalidation: {episodes: 4}\n",
	} {
		if code, body := do(t, "POST", s.URL()+"/api/v1/runs", "", cfg); code != http.StatusCreated {
			t.Fatalf("launch: %d %s", code, body)
		}
	}
	var runA struct {
		State string
		Steps []struct {
			Step       int
			Job        *struct{ Metrics map[string]float64 }
			Validation *struct {
				RewardMean float64 `json:"reward_mean"`
			}
		}
	}
	var rb struct{ State string }
	finished := testutil.Eventually(func() bool {
		_, ba := do(t, "GET", s.URL()+"/api/v1/runs/a", "", "")
		_, bb := do(t, "GET", s.URL()+"/api/v1/runs/b", "", "")
		json.Unmarshal(ba, &runA)
		json.Unmarshal(bb, &rb)
		return runA.State == "succeeded" && rb.State == "succeeded"
	})
	if !finished {
		t.Fatalf("runs did not finish within %s: a %s, b %s", testutil.Patience, runA.State, rb.State)
	}
	jobs := 0
	for _, st := range runA.Steps {
		if st.Job != nil && st.Job.Metrics != nil {
			jobs++
		}
	}
	if jobs == 0 {
		t.Fatal("run a trained no job: nothing for the trainer chart")
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1300),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/?run=a")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS(`#detail`)),
		chromedp.WaitVisible(chromedp.CSS(`#curve path.band`)),
		chromedp.WaitVisible(chromedp.CSS(`#curve circle.pt.val[data-step="2"]`)),
	); err != nil {
		t.Fatalf("chromium: run a's curves: %v", err)
	}
	eval := func(js string) string {
		v, err := chromedp.Run(tctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	count := func(sel string) int {
		n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	if got := eval(`document.querySelector("#run-name").textContent`); got != "a" {
		t.Errorf("/?run=a shows run %q", got)
	}
	if got := eval(`(() => { const a = document.querySelector("#grafana"); return a.hidden ? "hidden" : a.href; })()`); got != grafana {
		t.Errorf("Grafana link %q, want %s", got, grafana)
	}
	if got := eval(`location.search`); got != "?run=a" {
		t.Errorf("location.search %q", got)
	}
	for sel, want := range map[string]int{
		`#curve path.band`:              1,
		`#curve path.pern`:              2, // n=5 and n=6
		`#curve circle.pt.pern`:         2 * 3,
		`#trainer circle.pt.loss`:       jobs,
		`#trainer circle.pt.kl`:         jobs,
		`#trainer circle.pt.gradnorm`:   jobs,
		`#runs a[href="?run=b"]`:        1,
		`#runs tr.selected[data-run=a]`: 1,
	} {
		if got := count(sel); got != want {
			t.Errorf("%s: %d, want %d", sel, got, want)
		}
	}

	// Reward terms: one point per validated step and term, each the mean
	// of that term over the step's stored validation records (errored
	// ones left out), computed here from the store.
	_, _, evals, err := e.store.Snapshot(context.Background(), "a")
	if err != nil {
		t.Fatalf("snapshot a: %v", err)
	}
	if len(evals) != 3 {
		t.Fatalf("run a: %d evaluations, want 3", len(evals))
	}
	for _, ev := range evals {
		var sum [4]float64
		k := 0
		for _, r := range ev.Records {
			if !r.Errored {
				sum[0] += r.Terms.NoDeadlock
				sum[1] += r.Terms.Throughput
				sum[2] += r.Terms.Unfairness
				sum[3] += r.Terms.Idle
				k++
			}
		}
		if k != 8 { // 4 episodes at each of n=5 and n=6
			t.Fatalf("step %d: %d records, want 8", ev.Step, k)
		}
		for i, cls := range []string{"rnd", "rthru", "rfair", "ridle"} {
			want := sum[i] / float64(k)
			sel := fmt.Sprintf(`#terms circle.pt.%s[data-step="%d"]`, cls, ev.Step)
			got, err := chromedp.Run(tctx, chromedp.Evaluate[string](`(() => { const c = document.querySelector('`+sel+`'); return c ? c.getAttribute("data-value") : "missing"; })()`))
			if err != nil {
				t.Fatalf("%s: %v", sel, err)
			}
			var v float64
			if _, err := fmt.Sscan(got, &v); err != nil {
				t.Errorf("%s: data-value %q", sel, got)
				continue
			}
			if d := v - want; d > 1e-9 || d < -1e-9 {
				t.Errorf("%s: %v, want the mean %v", sel, v, want)
			}
		}
	}
	for _, cls := range []string{"rnd", "rthru", "rfair", "ridle"} {
		if got := count(`#terms path.` + cls); got != 1 {
			t.Errorf("#terms path.%s: %d, want 1", cls, got)
		}
		if got := count(`#terms circle.pt.` + cls); got != 3 {
			t.Errorf("#terms circle.pt.%s: %d, want 3", cls, got)
		}
	}
	if got := eval(`document.querySelector('#terms circle.pt.rthru[data-step="0"] title').textContent`); !strings.HasPrefix(got, "r_thru step 0: ") {
		t.Errorf("r_thru tooltip %q", got)
	}
	termsShot, err := chromedp.Run(tctx, chromedp.Screenshot(chromedp.CSS(`#terms`)))
	if err != nil {
		t.Fatalf("screenshot #terms: %v", err)
	}

	// Overlay run b's validation curve.
	eval(`document.querySelector("#runs tr[data-run=b] input.compare").click(), ""`)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#curve path.other`))); err != nil {
		t.Fatalf("compare run b: %v", err)
	}
	if got := count(`#curve circle.pt.other`); got != 2 { // b: steps 0 and 1
		t.Errorf("run b overlay: %d points, want 2", got)
	}
	// Smoothing 0.5: step 1's point is the mean of steps 0 and 1.
	eval(`(() => { const e = document.querySelector("#smooth"); e.value = "0.5"; e.dispatchEvent(new Event("input")); return ""; })()`)
	v0, v1 := runA.Steps[0].Validation.RewardMean, runA.Steps[1].Validation.RewardMean
	want := fmt.Sprintf("val step 1: %.3f", 0.5*v0+0.5*v1)
	if got := eval(`document.querySelector('#curve circle.pt.val[data-step="1"] title').textContent`); got != want {
		t.Errorf("smoothed: %q, want %q (validation %v, %v)", got, want, v0, v1)
	}
	// Zoom to steps 1 and 2.
	eval(`(() => { const e = document.querySelector("#xfrom"); e.value = "1"; e.dispatchEvent(new Event("input")); return ""; })()`)
	if got := count(`#curve circle.pt.val`); got != 2 {
		t.Errorf("zoomed to steps 1-2: %d validation points, want 2", got)
	}
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("GRPO_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard-run.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if err := os.WriteFile(filepath.Join(dir, "dashboard-terms.png"), termsShot, 0o644); err != nil {
		t.Fatal(err)
	}
}
