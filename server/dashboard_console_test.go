package server_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardNoConsoleErrors opens a run's page and wants nothing on
// the browser's console: the browser asked for /favicon.ico, which the
// daemon does not serve, and logged "Failed to load resource: ... 404"
// on every load.
func TestDashboardNoConsoleErrors(t *testing.T) {
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
	// Start the browser, then listen from the first request on.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	lctx, lcancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		msgs []string
		done = make(chan struct{})
	)
	messages := chromedp.Console(lctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			mu.Lock()
			msgs = append(msgs, string(m.Type)+": "+m.Text)
			mu.Unlock()
		}
	}()
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(s.URL()+"/?run=done"), chromedp.WaitVisible(chromedp.CSS(`#live.on`)),
		chromedp.WaitVisible(chromedp.CSS(`#steps tbody tr`)), chromedp.Sleep(time.Second)); err != nil {
		t.Fatalf("chromium: open the run's page: %v", err)
	}
	lcancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) > 0 {
		t.Errorf("the page's console:\n%s", strings.Join(msgs, "\n"))
	}
}
