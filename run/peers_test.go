package run_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/promote"
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

// TestAdmins: promote loads into --endpoint's URLs when given, else the
// run's endpoints; a run on the embedded backend or on ART names none,
// and the error says how to serve its adapters.
func TestAdmins(t *testing.T) {
	getenv := func(string) string { return "" }
	cfg := mustConfig(t, "run: {name: r, steps: 1}\ntrainer: {kind: jobs, url: 'http://127.0.0.1:1'}\ninference:\n  endpoints: [{url: 'http://a/v1'}, {url: 'http://b/v1'}]\n")
	clients, err := run.Admins(cfg, getenv, nil, "")
	if err != nil || len(clients) != 2 {
		t.Fatalf("the run's endpoints: %d clients, %v; want 2", len(clients), err)
	}
	clients, err = run.Admins(cfg, getenv, []string{"http://c/v1"}, "KEY")
	if err != nil || len(clients) != 1 {
		t.Fatalf("--endpoint: %d clients, %v; want 1", len(clients), err)
	}
	embedded := mustConfig(t, small)
	_, err = run.Admins(embedded, getenv, nil, "")
	if !errors.Is(err, promote.ErrNoEndpoints) || !strings.Contains(err.Error(), "grpo refmodel serve --data-dir") || !strings.Contains(err.Error(), "--endpoint") {
		t.Fatalf("embedded run: %v", err)
	}
	if clients, err := run.Admins(embedded, getenv, []string{"http://127.0.0.1:8000/v1"}, "KEY"); err != nil || len(clients) != 1 {
		t.Fatalf("embedded run with --endpoint: %d clients, %v; want 1", len(clients), err)
	}
	// An ART run names no endpoint either, and is not called embedded.
	art := embedded
	art.Trainer.Kind = config.TrainerART
	_, err = run.Admins(art, getenv, nil, "")
	if !errors.Is(err, promote.ErrNoEndpoints) || !strings.Contains(err.Error(), "trained with OpenPipe ART") || strings.Contains(err.Error(), "embedded") {
		t.Fatalf("ART run: %v", err)
	}
}
