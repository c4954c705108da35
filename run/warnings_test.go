package run_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/run"
)

// TestPlayWarns: a run on the embedded backend at the study's learning
// rate, 5e-6, which the backend's updates do not move the policy with,
// is warned of on its log and its events right after run_started; its
// trained adapters leave every validation episode as the base played it,
// which is warned of right before run_finished. Each warning comes once.
func TestPlayWarns(t *testing.T) {
	opts := options(t)
	var log testutil.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var mu sync.Mutex
	var events []orchestrator.Event
	opts.Events = func(e orchestrator.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	r := MustOpen(t, mustConfig(t, small+"trainer: {hyperparameters: {learning_rate: 5.0e-6}}\n"), opts)
	if err := r.Play(context.Background()); err != nil {
		t.Fatalf("Play: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var types []string
	for _, e := range events {
		if e.Type == orchestrator.EventWarning || e.Type == orchestrator.EventRunStarted || e.Type == orchestrator.EventRunFinished {
			types = append(types, e.Type)
		}
	}
	if got, want := strings.Join(types, " "), "run_started warning warning run_finished"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	first, last := events[1], events[len(events)-2]
	if first.Type != orchestrator.EventWarning || first.Warning.Code != run.WarnLearningRate || first.Run != "r" || first.Step != 0 ||
		!strings.Contains(first.Warning.Message, "learning_rate 5e-06 is far from what the embedded backend learns with") {
		t.Errorf("the event after run_started: %+v %+v, want the learning rate's warning", first, first.Warning)
	}
	if last.Type != orchestrator.EventWarning || last.Warning.Code != run.WarnValidationUnchanged || last.Step != 2 ||
		!strings.Contains(last.Warning.Message, "no trained adapter changed a validation episode: at each of the 2 steps validated after step 0") {
		t.Errorf("the event before run_finished: %+v %+v, want the unchanged validation's warning", last, last.Warning)
	}
	for _, code := range []string{run.WarnLearningRate, run.WarnValidationUnchanged} {
		if n := strings.Count(log.String(), "warning="+code); n != 1 {
			t.Errorf("%d log lines with warning=%s, want 1:\n%s", n, code, log.String())
		}
	}
}
