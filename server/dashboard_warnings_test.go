package server_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/grpo-dev/grpo/server"
)

// TestDashboardShowsWarnings: the page of a run the daemon plays shows
// the run's warnings: the start's, sent before the page opened, from the
// run's answer (warnings); a later one from its event, kept after
// run_finished (the end-of-run warning comes just before it); another
// run's not at all.
func TestDashboardShowsWarnings(t *testing.T) {
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	base := s.URL()
	launch(t, base, "", smallRun("long", 1000)+farRate)
	t.Cleanup(func() { do(t, "POST", base+"/api/v1/runs/long/cancel", "", "") })
	waitRun(t, base, "long", "its first step", func(r runJSON) bool { return len(r.Steps) > 0 })
	ctx := openDashboard(t, base+"/?run=long", 1280, 900)
	const text = `document.querySelector("#warnings").textContent`
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.querySelector("#warnings").hidden && `+text+`.startsWith("warning: trainer.hyperparameters.learning_rate 5e-06 is far from")`)); err != nil {
		got, _ := chromedp.Run(ctx, chromedp.Evaluate[string](text))
		t.Fatalf("page opened after the run started shows %q, want its learning rate's warning: %v", got, err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
	  const now = new Date().toISOString();
	  onEvent({type: "warning", run: "other", step: 1, time: now, data: {code: "learning_rate", message: "another run's"}});
	  onEvent({type: "warning", run: "long", step: 3, time: now, data: {code: "validation_unchanged", message: "no trained adapter changed a validation episode"}});
	  onEvent({type: "run_finished", run: "long", step: 3, time: now, data: {state: "succeeded"}});
	  const el = document.querySelector("#warnings");
	  return el.hidden + "|" + el.textContent;
	})()`))
	if err != nil {
		t.Fatalf("chromium: feed the events: %v", err)
	}
	lines := strings.Split(got, "\n")
	if !strings.HasPrefix(got, "false|") || len(lines) != 2 || !strings.Contains(lines[0], "learning_rate 5e-06") ||
		lines[1] != "warning: no trained adapter changed a validation episode" || strings.Contains(got, "another run's") {
		t.Errorf("after a second warning and run_finished the page shows %q, want both of the run's warnings", got)
	}
}
