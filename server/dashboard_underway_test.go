package server_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestDashboardUnderway: the run's view says what GET /api/v1/runs/{id}
// carries of what the run has under way (in_flight, validating, lease), as
// grpo runs show does, each line only when the run has it; it showed none
// of them. The job id, which a trainer names, is shown as text, not
// markup. The runs are played by this test's process (it holds their
// leases), so the daemon leaves them alone.
func TestDashboardUnderway(t *testing.T) {
	e := newEnv(t)
	const job = `busy/<img src=x onerror="window.injected=1">`
	at2 := underwayRuns(t, e.store, job)
	s := e.MustStart(t, server.Options{})
	page := openDashboard(t, s.URL()+"/?run=busy", 1280, 900)

	// shown selects run and answers the underway line once the page drew
	// the run as read now ("" when it is hidden): only render writes the
	// run's name, cleared here first.
	shown := func(run string) string {
		t.Helper()
		if _, err := chromedp.Run(page, chromedp.Evaluate[bool](`document.querySelector("#run-name").textContent = "", select(`+strconv.Quote(run)+`), true`)); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(page, chromedp.Poll[bool](`document.querySelector("#run-name").textContent === `+strconv.Quote(run))); err != nil {
			t.Fatalf("chromium: run %s shown: %v", run, err)
		}
		return underway(t, page)
	}
	localTime := func(t0 time.Time) string {
		t.Helper()
		got, err := chromedp.Run(page, chromedp.Evaluate[string](`new Date(`+strconv.Quote(t0.Format(time.RFC3339))+`).toLocaleTimeString()`))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	host, _ := os.Hostname()
	pid := os.Getpid()
	busyLease := e.lease(t, "busy")
	playedBy := func(l *checkpoint.LeaseView) string {
		return fmt.Sprintf("played by pid %d on %s since %s", pid, host, localTime(l.Started))
	}

	if got, want := shown("busy"), "step 1: being validated, not committed yet\n"+
		"step 2: trainer job "+job+" in flight, submitted "+localTime(at2)+"\n"+
		playedBy(busyLease); got != want {
		t.Errorf("busy run's underway line:\n%q\nwant\n%q", got, want)
	}
	if injected, err := chromedp.Run(page, chromedp.Evaluate[bool](`!!window.injected || document.querySelector("#underway img, #jobs img") !== null`)); err != nil || injected {
		t.Errorf("the job id was read as markup (%v)", err)
	}
	// The trainer jobs table lists the job in flight before any job_state
	// event (it listed committed steps' jobs only): no progress known yet.
	if got, want := jobRows(t, page), "2 "+job+" in flight - - - - - - -"; got != want {
		t.Errorf("trainer jobs before a job_state event:\n%q\nwant\n%q", got, want)
	}
	// A job_state event of the job in flight says its state and progress.
	if _, err := chromedp.Run(page, chromedp.Evaluate[bool](`onEvent({type: "job_state", run: "busy", step: 2, time: new Date().toISOString(), data: {id: `+strconv.Quote(job)+`, state: "running", progress: 0.4}}), true`)); err != nil {
		t.Fatal(err)
	}
	if got, want := underway(t, page), "step 2: trainer job "+job+" in flight (running, 40%), submitted "+localTime(at2); !slices.Contains(strings.Split(got, "\n"), want) {
		t.Errorf("after a job_state event the underway line is\n%q\nwant a line %q", got, want)
	}
	if got, want := jobRows(t, page), "2 "+job+" running 40% - - - - - -"; got != want {
		t.Errorf("trainer jobs after a job_state event:\n%q\nwant\n%q", got, want)
	}
	// A holder gone (its lease stale): what the run left, as grpo runs show says.
	if _, err := chromedp.Run(page, chromedp.Evaluate[bool](`render({...state.run, lease: {...state.run.lease, live: false}}), true`)); err != nil {
		t.Fatal(err)
	}
	if got, want := underway(t, page), "step 1: was being validated when the run stopped, not committed\n"+
		"step 2: trainer job "+job+" submitted "+localTime(at2)+", not committed (a resume waits for that job)\n"+
		fmt.Sprintf("not played: pid %d on %s no longer renews its lease (last heartbeat %s)", pid, host, localTime(busyLease.Heartbeat)); got != want {
		t.Errorf("busy run without a live holder:\n%q\nwant\n%q", got, want)
	}

	// A job_state event of the run just selected, before its view is
	// read, does not show the previous run's lines.
	if got, err := chromedp.Run(page, chromedp.Evaluate[string](`(() => {
	  select("idle");
	  onEvent({type: "job_state", run: "idle", step: 1, time: new Date().toISOString(), data: {id: "idle/step-0001", state: "running", progress: 0.1}});
	  const p = document.querySelector("#underway");
	  return p.hidden ? "" : p.textContent;
	})()`)); err != nil || got != "" {
		t.Errorf("selecting idle, then its job_state event: underway line %q (%v), want it hidden until idle is read", got, err)
	}
	if got, want := shown("idle"), playedBy(e.lease(t, "idle")); got != want {
		t.Errorf("idle run's underway line %q, want %q", got, want)
	}
	if got := shown("done"); got != "" {
		t.Errorf("finished run's underway line %q, want it hidden", got)
	}
}

// jobRows is the page's trainer jobs table, a row's cells joined by
// spaces, rows by " | ".
func jobRows(t *testing.T, page context.Context) string {
	t.Helper()
	got, err := chromedp.Run(page, chromedp.Evaluate[string](`[...document.querySelectorAll("#jobs tbody tr")].map((tr) => [...tr.children].map((td) => td.textContent).join(" ")).join(" | ")`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return got
}

// underway is the page's underway line, "" when it is hidden.
func underway(t *testing.T, page context.Context) string {
	t.Helper()
	got, err := chromedp.Run(page, chromedp.Evaluate[string](`(() => { const p = document.querySelector("#underway"); return p.hidden ? "" : p.textContent; })()`))
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return got
}

// lease is run's lease as GET /api/v1/runs/{id} shows it.
func (e *env) lease(t *testing.T, run string) *checkpoint.LeaseView {
	t.Helper()
	u, err := e.store.GetUnderway(context.Background(), run)
	if err != nil || u.Lease == nil {
		t.Fatalf("run %s's lease: %+v, %v", run, u.Lease, err)
	}
	var v checkpoint.RunView
	v.SetUnderway(u)
	return v.Lease
}
