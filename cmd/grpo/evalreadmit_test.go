package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/grpo-dev/grpo/refmodel"
)

// TestEvalKeepsAnotherModelDrained: grpo eval's fleet, as a run's, does
// not readmit an endpoint that came back serving another model than the
// one it listed at the start. The endpoint lists the model, fails its
// first completion (drained), then answers /health and lists another
// model; its completions would succeed (a reference backend behind it),
// so an eval that readmitted it would finish. It stays drained and the
// eval fails once the outage window passes, saying what it serves.
//
// The window must outlast the readmission probe: the probe loop ticks
// every 2s (inference.DefaultProbeInterval) from the fleet's start and
// probes a drained endpoint at the first tick 2s after its drain, so up to
// 4s after it, later on a loaded machine. A 3s window failed in CI before
// the probe had run; 10s leaves the probe 6s of slack.
func TestEvalKeepsAnotherModelDrained(t *testing.T) {
	b := refBackend(t, 1)
	real := b.InferenceHandler()
	var back atomic.Bool // drained once: back, with another model
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			id, root := refmodel.BaseModelName, "/weights/a"
			if back.Load() {
				id, root = "other-model", "/weights/b"
			}
			fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","root":%q}]}`, id, root)
			return
		case "/v1/chat/completions":
			if !back.Load() {
				back.Store(true)
				http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusServiceUnavailable)
				return
			}
		}
		real.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	code, _, errs := cli(t, "eval", "--base-url", srv.URL+"/v1", "--model", refmodel.BaseModelName, "--episodes", "1", "--n", "2", "--rounds", "1",
		"--retries", "0", "--retry-budget", "0s", "--outage-window", "10s", "--episode-replays", "0", "--max-errored-fraction", "0")
	if code == 0 || !strings.Contains(errs, "no longer lists inference.model "+refmodel.BaseModelName+" (it serves other-model") {
		t.Fatalf("eval against an endpoint back with another model: exit %d, stderr:\n%s", code, errs)
	}
}
