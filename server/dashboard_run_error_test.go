package server_test

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardCancelledNotAnError: a cancelled run's error line (what
// stopped it) was shown in red, as a failure's; a cancellation is not an
// error. A failed run's stays red.
func TestDashboardCancelledNotAnError(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for name, st := range map[string][2]string{
		"stopped": {checkpoint.StateCancelled, "interrupted: step 29: context canceled"},
		"broke":   {checkpoint.StateFailed, "trainer job broke.1/step-0002 failed: CUDA out of memory"},
	} {
		storeRun(t, e.store, t.TempDir(), name)
		if err := e.store.SetRunState(ctx, name, st[0], st[1]); err != nil {
			t.Fatal(err)
		}
	}
	s := e.MustStart(t, server.Options{})
	page := openDashboard(t, s.URL()+"/?run=stopped", 1280, 900)
	const red = "rgb(187, 0, 0)" // .error's #b00
	line := func(run string) (text, color string) {
		t.Helper()
		if _, err := chromedp.Run(page, chromedp.Evaluate[bool](`select("`+run+`"), true`)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(page, chromedp.Poll[bool](`document.querySelector("#run-name").textContent === "`+run+`" && document.querySelector("#run-error").textContent !== ""`)); err != nil {
			t.Fatalf("chromium: run %s's error line: %v", run, err)
		}
		got, err := chromedp.Run(page, chromedp.Evaluate[[]string](`(() => { const p = document.querySelector("#run-error"); return [p.textContent, getComputedStyle(p).color]; })()`))
		if err != nil || len(got) != 2 {
			t.Fatalf("chromium: %v %v", got, err)
		}
		return got[0], got[1]
	}
	if text, color := line("stopped"); text != "interrupted: step 29: context canceled" || color == red {
		t.Errorf("cancelled run: error line %q in %s, want it said, not in red (%s)", text, color, red)
	}
	if text, color := line("broke"); text != "trainer job broke.1/step-0002 failed: CUDA out of memory" || color != red {
		t.Errorf("failed run: error line %q in %s, want it in red (%s)", text, color, red)
	}
	// And back: the cancelled run's line is not left red by the failure's.
	if _, color := line("stopped"); color == red {
		t.Errorf("cancelled run after a failed one: error line in %s", color)
	}
}
