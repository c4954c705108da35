package run_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/run"
)

// TestOpenPeersEvaluateEmbedded: peers opened to evaluate an embedded
// run's checkpoints start their own backend on a temporary directory,
// serve the base model, and leave nothing behind once closed (twice).
func TestOpenPeersEvaluateEmbedded(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	p, err := run.OpenPeers(context.Background(), mustConfig(t, small), run.PeersOptions{Evaluate: true})
	if err != nil {
		t.Fatal(err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "grpo-eval-*")); len(dirs) != 1 {
		t.Fatalf("temporary directories %v while open, want one", dirs)
	}
	if served := p.Served(context.Background()); !served[run.EmbeddedModel] {
		t.Fatalf("Served()=%v, want %s among them", served, run.EmbeddedModel)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if dirs, _ := filepath.Glob(filepath.Join(tmp, "grpo-eval-*")); len(dirs) != 0 {
		t.Fatalf("temporary directories %v left after Close", dirs)
	}
}

// TestOpenPeersEvaluateNeedsNoTrainer: an evaluation of a run on
// endpoints needs its endpoints only: a trainer that is down fails a
// run's peers (with the trainer named) but not an evaluation's.
func TestOpenPeersEvaluateNeedsNoTrainer(t *testing.T) {
	inf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"},{"id":"r-best","object":"model"}]}`))
		}
	}))
	defer inf.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	cfg := mustConfig(t, "run: {name: r, steps: 1}\ntrainer: {kind: jobs, url: '"+downURL+"', base_model: m}\ninference:\n  model: m\n  endpoints: [{url: '"+inf.URL+"/v1'}]\n")
	ctx := context.Background()
	if _, err := run.OpenPeers(ctx, cfg, run.PeersOptions{Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "trainer "+downURL) {
		t.Fatalf("a run's peers with the trainer down: err=%v, want the trainer named", err)
	}
	p, err := run.OpenPeers(ctx, cfg, run.PeersOptions{Getenv: func(string) string { return "" }, Evaluate: true})
	if err != nil {
		t.Fatalf("an evaluation's peers with the trainer down: %v", err)
	}
	defer p.Close()
	if served := p.Served(ctx); len(served) != 2 || !served["m"] || !served["r-best"] {
		t.Fatalf("Served()=%v, want m and r-best", served)
	}
}

// TestOpenPeersEmbeddedNeedsDataDir: a run on the embedded backend keeps
// its adapters in its data directory: none given is an error, not a
// temporary one.
func TestOpenPeersEmbeddedNeedsDataDir(t *testing.T) {
	_, err := run.OpenPeers(context.Background(), mustConfig(t, small), run.PeersOptions{})
	if err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Fatalf("err=%v, want the missing data directory named", err)
	}
}
