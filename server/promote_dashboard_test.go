package server_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardPromoteButton clicks Promote on a stored run's page in
// headless Chromium, with the daemon asking for a token: the page sends
// the token typed in its form, and the run's endpoint then serves
// <run>-best from the best step's adapter.
func TestDashboardPromoteButton(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	b := refBackend(t)
	vllm := httptest.NewServer(b.InferenceHandler())
	defer vllm.Close()
	e := newEnv(t)
	paths := storeRun(t, e.store, t.TempDir(), "ui", vllm.URL+"/v1")
	s := e.MustStart(t, server.Options{Token: "s3cret"})

	actx, acancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chrome), chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.UserDataDir(t.TempDir()))
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	result := func(want string) {
		t.Helper()
		if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector('#promote-result').textContent.includes('`+want+`')`)); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(`#promote-result`)))
			t.Fatalf("chromium: promote result line %q does not say %q: %v", text, want, err)
		}
	}
	// Without the token the daemon refuses, and the page says so.
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#detail`)), chromedp.Click(chromedp.CSS(`#promote`))); err != nil {
		t.Fatalf("chromium: click Promote: %v", err)
	}
	result("bearer token")
	if err := chromedp.Do(tctx, chromedp.SetValue(chromedp.CSS(`#token`), "s3cret"), chromedp.Click(chromedp.CSS(`#promote`))); err != nil {
		t.Fatalf("chromium: click Promote: %v", err)
	}
	result("served as ui-best")
	models, err := inference.NewAdminClient(vllm.URL+"/v1", inference.AdminOptions{}).Models(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	root := ""
	for _, m := range models {
		if m.ID == "ui-best" {
			root = m.Root
		}
	}
	if root != paths[2] {
		t.Fatalf("after the button ui-best is served from %q, want %s", root, paths[2])
	}

	// A run on the embedded backend names no endpoint: its page's button
	// is disabled and says why; the endpoint run's is enabled.
	storeRun(t, e.store, t.TempDir(), "emb")
	enabled := func(run string) (bool, string) {
		t.Helper()
		if err := chromedp.Do(tctx, chromedp.Navigate(s.URL()+"/?run="+run)); err != nil {
			t.Fatalf("chromium: open run %s: %v", run, err)
		}
		if _, err := chromedp.Run(tctx, chromedp.Poll[bool](`document.querySelector('#run-name').textContent === '`+run+`'`)); err != nil {
			t.Fatalf("chromium: run %s's page: %v", run, err)
		}
		on, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`!document.querySelector('#promote').disabled`))
		if err != nil {
			t.Fatal(err)
		}
		title, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('#promote').title`))
		if err != nil {
			t.Fatal(err)
		}
		return on, title
	}
	if on, title := enabled("emb"); on || !strings.Contains(title, "names no inference endpoint") {
		t.Fatalf("embedded run: Promote enabled %v, title %q", on, title)
	}
	if on, title := enabled("ui"); !on || !strings.Contains(title, "RUN-best") {
		t.Fatalf("endpoint run: Promote enabled %v, title %q", on, title)
	}
}
