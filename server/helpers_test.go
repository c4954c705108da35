package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/server"
	"github.com/prometheus/client_golang/prometheus"
)

// smallRun is a run config that finishes in a few seconds on the
// embedded backend.
func smallRun(name string, steps int) string {
	return "run: {name: " + name + ", steps: " + itoa(steps) + "}\nvalidation: {episodes: 4}\n"
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// env is a daemon's store and data directory, reusable across restarts.
type env struct {
	dir   string
	store *checkpoint.Store
}

func newEnv(tb testing.TB) *env {
	dir := tb.TempDir()
	return &env{dir: dir, store: checkpoint.New(filepath.Join(dir, "grpo.db"), checkpoint.Options{})}
}

// MustStart starts a daemon on a loopback port; it is closed at cleanup.
func (e *env) MustStart(tb testing.TB, opts server.Options) *server.Server {
	tb.Helper()
	opts.Store = e.store
	opts.DataDir = filepath.Join(e.dir, "data")
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	s := server.New(opts)
	if err := s.Start(context.Background()); err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// do sends a request and returns the status and body.
func do(tb testing.TB, method, url, token, body string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/yaml")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, b
}

// runJSON is the part of GET /api/v1/runs/{id} the tests read.
type runJSON struct {
	Run    string `json:"run"`
	State  string `json:"state"`
	Error  string `json:"error"`
	Hosted bool   `json:"hosted"`
	Steps  []struct {
		Step       int `json:"step"`
		Validation *struct {
			RewardMean float64 `json:"reward_mean"`
		} `json:"validation"`
		Adapter       *checkpoint.Adapter `json:"adapter"`
		AdapterOnDisk *bool               `json:"adapter_on_disk"`
	} `json:"steps"`
	Best *checkpoint.Selection `json:"best"`
}

func getRun(tb testing.TB, base, name string) runJSON {
	tb.Helper()
	code, body := do(tb, "GET", base+"/api/v1/runs/"+name, "", "")
	if code != http.StatusOK {
		tb.Fatalf("GET run %s = %d %s", name, code, body)
	}
	var r runJSON
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatalf("decode run: %v\n%s", err, body)
	}
	return r
}

// waitRun polls run name until cond holds, failing after
// testutil.Patience.
func waitRun(tb testing.TB, base, name, what string, cond func(runJSON) bool) runJSON {
	tb.Helper()
	var r runJSON
	if !testutil.Eventually(func() bool { r = getRun(tb, base, name); return cond(r) }) {
		tb.Fatalf("run %s: %s not reached in %v; last: state %s, %d steps, error %q", name, what, testutil.Patience, r.State, len(r.Steps), r.Error)
	}
	return r
}

func finished(r runJSON) bool { return r.State != checkpoint.StateRunning && !r.Hosted }

func launch(tb testing.TB, base, token, cfg string) runJSON {
	tb.Helper()
	code, body := do(tb, "POST", base+"/api/v1/runs", token, cfg)
	if code != http.StatusCreated {
		tb.Fatalf("POST /api/v1/runs = %d %s", code, body)
	}
	var r runJSON
	if err := json.Unmarshal(body, &r); err != nil {
		tb.Fatalf("decode: %v", err)
	}
	return r
}

func contains(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }

// refBackend opens a reference backend on a temporary directory; it is
// closed at cleanup.
func refBackend(tb testing.TB) *refmodel.Backend {
	tb.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}
