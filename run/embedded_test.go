package run

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/refmodel"
)

// TestBaseCoordinationRange: the config accepts exactly what the backend
// does, so a valid config never fails at startEmbedded.
func TestBaseCoordinationRange(t *testing.T) {
	if config.MinBaseCoordination != refmodel.MinBaseCoordination || config.MaxBaseCoordination != refmodel.MaxBaseCoordination {
		t.Fatalf("config accepts %v to %v, refmodel %v to %v", config.MinBaseCoordination, config.MaxBaseCoordination, refmodel.MinBaseCoordination, refmodel.MaxBaseCoordination)
	}
	cfg := config.Default()
	cfg.Run.Seed = 9
	cfg.Trainer.BaseCoordination = -0.7
	got := embeddedOptionsOf(cfg, "/d", nil)
	if got.DataDir != "/d" || got.Seed != 9 || got.BaseCoordination != -0.7 {
		t.Fatalf("embeddedOptionsOf: %+v", got)
	}
}

// TestEmbeddedCloseWaitsForRequests: Close returns only once the requests
// its servers were serving have returned (closing their connections
// cancels them), so nothing writes into the data directory after it; a
// request that comes later is turned away. The handler goes on for 50 ms
// after its request is cancelled, as a job record being written does:
// http.Server.Close alone returned before it ended.
func TestEmbeddedCloseWaitsForRequests(t *testing.T) {
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	e := &embeddedBackend{backend: b}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	started := make(chan struct{})
	var ended atomic.Bool
	url, err := e.serve(ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
		time.Sleep(50 * time.Millisecond) // the handler's own work after the cancel
		ended.Store(true)
	}))
	if err != nil {
		t.Fatal(err)
	}
	go http.Get(url)
	<-started
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !ended.Load() {
		t.Fatal("Close returned while a request was still being served")
	}
	rec := httptest.NewRecorder()
	e.counted(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("a request after Close = %d, want 503", rec.Code)
	}
}
