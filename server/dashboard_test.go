package server_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardSettings: the page learns the Grafana link from the
// daemon; without one it gets none.
func TestDashboardSettings(t *testing.T) {
	for url, want := range map[string]string{"": `{"grafana_url":""}`, "http://127.0.0.1:3000/d/grpo": `{"grafana_url":"http://127.0.0.1:3000/d/grpo"}`} {
		s := newEnv(t).MustStart(t, server.Options{GrafanaURL: url})
		code, body := do(t, "GET", s.URL()+"/dashboard.json", "", "")
		if code != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("GrafanaURL %q: GET /dashboard.json = %d %s, want %s", url, code, body, want)
		}
	}
}

func TestDashboardServesAssets(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	for path, want := range map[string]string{"/": `<svg id="curve"`, "/app.js": "new WebSocket", "/style.css": ".chart"} {
		code, body := do(t, "GET", s.URL()+path, "", "")
		if code != http.StatusOK || !contains(body, want) {
			t.Errorf("GET %s = %d, want 200 containing %q", path, code, want)
		}
	}
}

// TestDashboardChromium opens the dashboard in headless Chromium, launches
// a run through the page's form and waits for the curve's points, then
// keeps a screenshot ($GRPO_ARTIFACTS, else the test's temp dir).
func TestDashboardChromium(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1100),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	// The first Run starts the browser for the life of its context: no
	// timeout on it, only on the steps after.
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	defer tcancel()
	err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.SetValue(chromedp.CSS(`#config`), "run: {name: ui, steps: 3}\nvalidation: {episodes: 8}\n"),
		chromedp.Click(chromedp.CSS(`#launch-btn`)),
		chromedp.WaitVisible(chromedp.CSS(`#detail`)),
		// Four validation points (steps 0-3) appear as the run goes.
		chromedp.WaitVisible(chromedp.CSS(`#curve circle.pt.val[data-step="3"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#run-state.succeeded`)),
	)
	if err != nil {
		t.Fatalf("chromium: launch a run from the page and wait for its curve: %v", err)
	}
	count := func(sel string) int {
		n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	points, valPoints, best, rows := count("#curve circle.pt"), count("#curve circle.pt.val"), count("#curve circle.best"), count("#steps tbody tr")
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if valPoints != 4 || points != 4+3 || best != 1 || rows != 4 {
		t.Fatalf("dashboard shows %d points (%d validation), %d best markers, %d step rows; want 7 (4), 1, 4", points, valPoints, best, rows)
	}
	dir := os.Getenv("GRPO_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// TestDashboardChartLongRun draws the dashboard's chart, in Chromium, with
// the points of a run of 100,000 validated steps (a daemon allows
// --max-steps 100000): spreading them into Math.min's arguments threw
// "Maximum call stack size exceeded" above about 124,000 points, and the
// run's whole view stayed blank.
func TestDashboardChartLongRun(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(t.TempDir()))
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 120*time.Second)
	defer tcancel()
	// Two series and a band of 100,000 points each: 400,000 values, the
	// lowest -0.5 (step 0) and the highest 1.5 (step 99,999).
	const script = `(() => {
	  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
	  svg.setAttribute("viewBox", "0 0 640 200");
	  const N = 100000, v = (i) => -0.5 + 2 * i / (N - 1);
	  const pts = Array.from({length: N}, (_, i) => [i, v(i)]);
	  const band = pts.map((p) => [p[0], p[1] - 0.01, p[1] + 0.01]);
	  try {
	    chart(svg, [{cls: "val", pts}, {cls: "train", pts: pts.map((p) => [p[0], p[1] / 2])}], {xmax: N - 1, band, right: {cls: "meals", pts}});
	  } catch (e) { return "error: " + e.message; }
	  const labels = [...svg.querySelectorAll("text")].map((t) => t.textContent);
	  return labels.slice(0, 5).join(" ");
	})()`
	got, err := chromedp.Run(tctx, chromedp.Evaluate[string](script))
	if err != nil {
		t.Fatalf("chromium: draw the chart: %v", err)
	}
	// The y axis's five labels span the values, which the band widens
	// to [-0.51, 1.51], with a 5% margin (0.101) each side: -0.611 to
	// 1.611 in quarters of 0.5555.
	if want := "-0.61 -0.06 0.50 1.06 1.61"; got != want {
		t.Fatalf("chart of 100,000 steps: %q, want the y labels %q", got, want)
	}
}

// TestDashboardOtherRunsRowsAdvance: while one run's page is open, another
// run's row in the list shows its committed steps as they come (it was
// refreshed only when a run started or finished).
func TestDashboardOtherRunsRowsAdvance(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.UserDataDir(t.TempDir()))
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/?run=done")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 120*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#live.on`))); err != nil {
		t.Fatalf("chromium: the page's event stream: %v", err)
	}
	if code, body := do(t, "POST", s.URL()+"/api/v1/runs", "", smallRun("live", 400)); code != http.StatusCreated {
		t.Fatalf("launch: %d %s", code, body)
	}
	defer do(t, "POST", s.URL()+"/api/v1/runs/live/cancel", "", "")
	// The row of run "live" shows step 3 or later while it is running.
	const row = `[...document.querySelectorAll('#runs tbody tr')].find((tr) => tr.dataset.run === 'live')`
	if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`(() => { const tr = `+row+`; return !!tr && tr.children[1].textContent === 'running' && Number(tr.children[2].textContent) >= 3; })()`)); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => { const tr = `+row+`; return tr ? tr.textContent : 'no row'; })()`))
		t.Fatalf("chromium: run live's row did not advance while it ran (row: %q): %v", text, err)
	}
	if sel, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('#run-name').textContent`)); err != nil || sel != "done" {
		t.Fatalf("the page's selected run is %q (%v), want done", sel, err)
	}
}
