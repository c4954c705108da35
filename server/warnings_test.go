package server_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/run"
	"github.com/grpo-dev/grpo/server"
)

// farRate is a posted run on the embedded backend at the study's learning
// rate, 5e-6, with which the backend's updates do not move the policy.
const farRate = "trainer: {hyperparameters: {learning_rate: 5.0e-6}}\n"

// TestDaemonRunWarns: a run the daemon plays gets the run's warnings,
// as grpo run's do, on the daemon's log and its event stream: at a
// learning rate the embedded backend does not learn with, one right after
// run_started; and, its adapters having changed no validation episode,
// one right before run_finished. GET /api/v1/runs/{id} serves the warnings
// of a run that plays, so that a page opened after its start shows them.
func TestDaemonRunWarns(t *testing.T) {
	e := newEnv(t)
	var log testutil.Buffer
	s := e.MustStart(t, server.Options{Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	base := s.URL()
	conn, _, err := dialWS(t, base, "?run=far", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	launch(t, base, "", smallRun("far", 2)+farRate)
	var stream []orchestrator.Event
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	for len(stream) == 0 || stream[len(stream)-1].Type != orchestrator.EventRunFinished {
		var ev orchestrator.Event
		if err := conn.ReadJSON(&ev); err != nil {
			t.Fatalf("read: %v", err)
		}
		stream = append(stream, ev)
	}
	var order []string
	for i, ev := range stream {
		switch ev.Type {
		case orchestrator.EventRunStarted, orchestrator.EventRunFinished:
			order = append(order, ev.Type)
		case orchestrator.EventWarning:
			order = append(order, ev.Warning.Code)
			if i == 0 || ev.Run != "far" || ev.Warning.Message == "" {
				t.Errorf("warning event %d: %+v %+v", i, ev, ev.Warning)
			}
		}
	}
	if got, want := strings.Join(order, " "), "run_started "+run.WarnLearningRate+" "+run.WarnValidationUnchanged+" run_finished"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if ev := stream[1]; ev.Warning == nil || !strings.Contains(ev.Warning.Message, "learning_rate 5e-06 is far from what the embedded backend learns with") {
		t.Errorf("the event after run_started: %+v, want the learning rate's warning", ev)
	}
	if ev := stream[len(stream)-2]; ev.Warning == nil || !strings.Contains(ev.Warning.Message, "no trained adapter changed a validation episode: at each of the 2 steps validated after step 0") {
		t.Errorf("the event before run_finished: %+v, want the unchanged validation's warning", ev)
	}
	for _, code := range []string{run.WarnLearningRate, run.WarnValidationUnchanged} {
		if n := strings.Count(log.String(), "run=far warning="+code); n != 1 {
			t.Errorf("%d daemon log lines with warning=%s, want 1:\n%s", n, code, log.String())
		}
	}

	// A run that plays long enough to be read while it plays.
	long, _, err := dialWS(t, base, "?run=long", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer long.Close()
	launch(t, base, "", smallRun("long", 1000)+farRate)
	long.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		var ev orchestrator.Event
		if err := long.ReadJSON(&ev); err != nil {
			t.Fatalf("read: %v", err)
		}
		if ev.Type == orchestrator.EventWarning {
			break
		}
	}
	code, body := do(t, "GET", base+"/api/v1/runs/long", "", "")
	var detail struct {
		Hosted   bool                 `json:"hosted"`
		Warnings []orchestrator.Event `json:"warnings"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &detail) != nil {
		t.Fatalf("GET run long = %d %s", code, body)
	}
	if !detail.Hosted || len(detail.Warnings) != 1 || detail.Warnings[0].Warning == nil || detail.Warnings[0].Warning.Code != run.WarnLearningRate {
		t.Errorf("GET run long while it plays: hosted %v, warnings %s; want the learning rate's", detail.Hosted, body)
	}
	if code, body := do(t, "POST", base+"/api/v1/runs/long/cancel", "", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	waitRun(t, base, "long", "cancelled", finished)
	if strings.Contains(getRaw(t, base, "long"), `"warnings"`) {
		t.Errorf("GET run long once it ended holds warnings: only a run that plays has them")
	}
}

// getRaw is the body of GET /api/v1/runs/{name}.
func getRaw(tb testing.TB, base, name string) string {
	tb.Helper()
	code, body := do(tb, "GET", base+"/api/v1/runs/"+name, "", "")
	if code != http.StatusOK {
		tb.Fatalf("GET run %s = %d %s", name, code, body)
	}
	return string(body)
}
