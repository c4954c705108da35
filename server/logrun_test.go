package server_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/server"
)

// TestLogNamesTheRunOnce: every line the daemon logs about a run it plays
// names the run once; the daemon gave the run a logger naming it, and the
// orchestrator (and the run's fleet) named it again: "resampling
// zero-variance groups" run=once run=once.
func TestLogNamesTheRunOnce(t *testing.T) {
	e := newEnv(t)
	var buf testutil.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s := e.MustStart(t, server.Options{Logger: logger})
	launch(t, s.URL(), "", smallRun("once", 2)+"grpo: {resample_zero_variance: true, groups: 6, episodes_per_group: 2}\n")
	waitRun(t, s.URL(), "once", "finish", finished)
	s.Close()
	// The orchestrator's lines (resampling), the embedded backend's (a
	// job queued) and the daemon's (run finished) all name the run.
	want := map[string]bool{"resampling zero-variance groups": false, "trainer job queued": false, "run finished": false}
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if n := strings.Count(line, " run="); n > 1 {
			t.Errorf("the run named %d times: %s", n, line)
		}
		for msg := range want {
			named := strings.Contains(line, " run=once ") || strings.HasSuffix(line, " run=once")
			if strings.Contains(line, `msg="`+msg+`"`) && named {
				want[msg] = true
			}
		}
	}
	for msg, seen := range want {
		if !seen {
			t.Errorf("no line %q naming the run:\n%s", msg, buf.String())
		}
	}
}
