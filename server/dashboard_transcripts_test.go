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
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardTranscripts: a run with validation.transcripts 1 at n 5
// and 6 stores one replay per table size and step; the API serves them
// per step (400 for a bad step, 404 for a step without validation), the
// run view only counts them, and in headless Chromium the step table
// opens a step's list and replays an episode round by round, each row
// what the store holds. Screenshot: $GRPO_ARTIFACTS/dashboard-transcripts.png.
func TestDashboardTranscripts(t *testing.T) {
	chrome := binary(t, "GRPO_CHROMIUM", "chromium", "chromium-browser")
	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	cfg := "run: {name: t, steps: 1}\nvalidation: {n: [5, 6], episodes: 2, transcripts: 1}\n"
	if code, body := do(t, "POST", s.URL()+"/api/v1/runs", "", cfg); code != http.StatusCreated {
		t.Fatalf("launch: %d %s", code, body)
	}
	var view struct {
		State string
		Steps []struct {
			Step        int
			Transcripts int
			Validation  map[string]json.RawMessage
		}
	}
	finished := testutil.Eventually(func() bool {
		_, b := do(t, "GET", s.URL()+"/api/v1/runs/t", "", "")
		json.Unmarshal(b, &view)
		return view.State == "succeeded"
	})
	if !finished {
		t.Fatalf("run did not finish within %s: %s", testutil.Patience, view.State)
	}
	for _, st := range view.Steps {
		if st.Transcripts != 2 {
			t.Errorf("step %d: run view counts %d transcripts, want 2", st.Step, st.Transcripts)
		}
		if _, ok := st.Validation["transcripts"]; ok {
			t.Errorf("step %d: run view ships the transcripts", st.Step)
		}
	}
	_, _, evals, err := e.store.Snapshot(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	stored := evals[1].Transcripts
	if len(stored) != 2 || stored[0].N != 5 || stored[1].N != 6 || len(stored[1].Rounds) < 2 {
		t.Fatalf("stored transcripts of step 1: %+v", stored)
	}
	for _, rp := range stored {
		for _, rd := range rp.Rounds {
			if len(rd.Moves) != rp.N {
				t.Fatalf("%s round %d: %d moves, want %d", rp.ID, rd.Round, len(rd.Moves), rp.N)
			}
		}
	}
	code, body := do(t, "GET", s.URL()+"/api/v1/runs/t/steps/1/transcripts", "", "")
	var served []checkpoint.EpisodeReplay
	if err := json.Unmarshal(body, &served); code != http.StatusOK || err != nil || len(served) != 2 || served[1].ID != stored[1].ID {
		t.Fatalf("GET transcripts: %d %v %.200s", code, err, body)
	}
	for path, want := range map[string]int{"/api/v1/runs/t/steps/x/transcripts": 400, "/api/v1/runs/t/steps/9/transcripts": 404, "/api/v1/runs/nope/steps/0/transcripts": 404} {
		if code, body := do(t, "GET", s.URL()+path, "", ""); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1600),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL()+"/?run=t")); err != nil {
		t.Fatalf("chromium: open dashboard: %v", err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	eval := func(js string) string {
		v, err := chromedp.Run(tctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#steps button.tx-open[data-step="1"]`))); err != nil {
		t.Fatalf("chromium: step 1's replays button: %v", err)
	}
	eval(`document.querySelector('#steps button.tx-open[data-step="1"]').click(), ""`)
	if err := chromedp.Do(tctx, chromedp.WaitVisible(chromedp.CSS(`#tx-list li[data-episode="`+stored[1].ID+`"]`))); err != nil {
		t.Fatalf("chromium: episode list: %v", err)
	}
	if got := eval(`String(document.querySelectorAll("#tx-list li").length)`); got != "2" {
		t.Errorf("episode list: %s entries, want 2", got)
	}
	// Replay the n=6 episode (the n=5 one may deadlock in its first round).
	rp := stored[1]
	eval(`document.querySelector('#tx-list li[data-episode="` + rp.ID + `"] button').click(), ""`)
	// rows returns the replayed round as "action|ok|forks|output" per philosopher.
	rows := func() []string {
		js := `JSON.stringify([...document.querySelectorAll("#tx-moves tbody tr")].map((tr) => [...tr.children].slice(1).map((td) => td.textContent).join("|")))`
		var out []string
		if err := json.Unmarshal([]byte(eval(js)), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := func(rd checkpoint.ReplayRound) []string {
		var out []string
		for _, m := range rd.Moves {
			ok, forks := "no", "none"
			if m.OK {
				ok = "yes"
			}
			if len(m.Forks) > 0 {
				forks = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(m.Forks)), ", "), "[]")
			}
			out = append(out, m.Action+"|"+ok+"|"+forks+"|"+m.Output)
		}
		return out
	}
	for k := range 2 {
		rd := rp.Rounds[k]
		if got, w := rows(), want(rd); fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("round %d shown:\n%q\nstored:\n%q", rd.Round, got, w)
		}
		if got := eval(`document.querySelector("#tx-round").textContent`); got != fmt.Sprintf("%s: round %d of %d", rp.ID, rd.Round, len(rp.Rounds)) {
			t.Errorf("round label %q", got)
		}
		if k == 0 {
			eval(`document.querySelector("#tx-next").click(), ""`)
		}
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
	if err := os.WriteFile(filepath.Join(dir, "dashboard-transcripts.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
