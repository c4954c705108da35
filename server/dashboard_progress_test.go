package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// openDashboard opens url in headless Chromium with a window of w by h
// pixels and waits for the page's event stream; the context ends at
// cleanup.
func openDashboard(t *testing.T, url string, w, h int) context.Context {
	t.Helper()
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(w, h))
	t.Cleanup(acancel)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(tcancel)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#live.on`)), chromedp.WaitVisible(chromedp.CSS(`#detail`))); err != nil {
		t.Fatalf("chromium: the page's run and event stream: %v", err)
	}
	return tctx
}

// TestDashboardProgressAsyncSteps feeds the page the events of an
// asynchronous pipeline (grpo.max_off_policy_steps: 1, docs/EVENTS.md):
// step 1's validation plays after step 2 started, while step 3's training
// episodes are sampled ahead. The progress line counted every episode of
// the run since the last step_started under whichever step the last
// episode belonged to ("step 3: 5 episodes played", "step 1: 18 episodes"
// for a validation of 8); it must count each step's episodes apart.
func TestDashboardProgressAsyncSteps(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "done")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=done", 1280, 900)
	const script = `(() => {
	  const ev = (type, step, data) => onEvent({type, run: "done", step, time: new Date().toISOString(), data});
	  const ep = (step, split, i) => ev("episode_finished", step, {split, id: (split === "train" ? "s" : "v") + step + "-e" + i, n: 5, reward: 0.1});
	  ev("step_started", 1, {n: 5, episodes: 6, validation: 8});
	  for (let i = 0; i < 6; i++) ep(1, "train", i);
	  for (let i = 0; i < 2; i++) ep(2, "train", i);
	  ev("step_started", 2, {n: 5, episodes: 0, validation: 8});
	  for (let i = 0; i < 3; i++) ep(1, "validation", i);
	  for (let i = 2; i < 6; i++) ep(2, "train", i);
	  for (let i = 0; i < 2; i++) ep(3, "train", i);
	  for (let i = 3; i < 5; i++) ep(1, "validation", i);
	  return document.querySelector("#progress").textContent;
	})()`
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](script))
	if err != nil {
		t.Fatalf("chromium: feed the events: %v", err)
	}
	for _, want := range []string{"step 1: 6 of 6 training, 5 of 8 validation episodes", "step 2: 6 training, 0 of 8 validation episodes", "step 3: 2 training episodes"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress %q: want it to contain %q", got, want)
		}
	}
	// Step 1 committed: its count goes, the others stay.
	got, err = chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
	  onEvent({type: "step_committed", run: "done", step: 1, data: {step: 1, n: 5}});
	  return document.querySelector("#progress").textContent;
	})()`))
	if err != nil {
		t.Fatalf("chromium: commit step 1: %v", err)
	}
	if strings.Contains(got, "step 1:") || !strings.Contains(got, "step 2: 6 training, 0 of 8 validation episodes") || !strings.Contains(got, "step 3: 2 training episodes") {
		t.Errorf("after step 1 committed, progress %q: want steps 2 and 3 only", got)
	}
}

// TestDashboardProgressClearedOnSelect: the progress line belongs to the
// run shown; picking another run in the list left the first run's line
// ("step 2: 3 training episodes") over the second run's page.
func TestDashboardProgressClearedOnSelect(t *testing.T) {
	e := newEnv(t)
	storeRun(t, e.store, t.TempDir(), "one")
	storeRun(t, e.store, t.TempDir(), "two")
	s := e.MustStart(t, server.Options{})
	ctx := openDashboard(t, s.URL()+"/?run=one", 1280, 900)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
	  onEvent({type: "step_started", run: "one", step: 2, time: new Date().toISOString(), data: {n: 5, episodes: 6, validation: 4}});
	  const before = document.querySelector("#progress").textContent;
	  document.querySelector('#runs tbody tr[data-run="two"] a').click();
	  return before + "|" + document.querySelector("#progress").textContent;
	})()`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	before, after, _ := strings.Cut(got, "|")
	if !strings.Contains(before, "step 2") || after != "" {
		t.Errorf("progress of run one %q, then after selecting run two %q: want it empty", before, after)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector("#run-name").textContent === "two"`)); err != nil {
		t.Fatalf("run two not shown: %v", err)
	}
}
