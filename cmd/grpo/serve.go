package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

const serveSynopsis = `Usage: grpo serve [--addr HOST:PORT] [--db PATH] [--data-dir DIR] [flags]

Runs the daemon: an HTTP API that launches runs from a posted YAML or JSON
config and reads them back, Prometheus metrics on /metrics, run events on
the websocket /ws, and a dashboard with live reward curves on /.

  POST /api/v1/runs              launch (config body; 201 with the run)
  GET  /api/v1/runs              list
  GET  /api/v1/runs/{id}         config, steps, best step
  GET  /api/v1/runs/{id}/steps   steps
  GET  /api/v1/runs/{id}/best    selected step and adapter
  POST /api/v1/runs/{id}/cancel  cancel

A posted config cannot choose file paths: the daemon owns the store and
keeps each run's files under <data-dir>/<run>. Runs the store holds as
running are resumed at start; on SIGINT/SIGTERM the daemon stops its runs
so that the next start resumes them.

It listens on loopback unless told otherwise. On any other address the
mutating endpoints require 'Authorization: Bearer <token>' with the token
from $GRPO_TOKEN (see --token-env), and the daemon refuses to start without
one.
`

func (m *Main) serve(ctx context.Context, args []string) error {
	fs := m.newFlags("serve", serveSynopsis)
	addr := fs.String("addr", server.DefaultAddr, "listen address")
	db := fs.String("db", config.Default().Run.DB, "bbolt store")
	dataDir := fs.String("data-dir", "", "per-run files (default: <db>.data next to the store)")
	tokenEnv := fs.String("token-env", "GRPO_TOKEN", "environment variable holding the bearer token")
	var origins listFlag
	fs.Var(&origins, "allow-origin", "browser origin allowed on /ws besides the daemon's own (repeatable), e.g. http://grafana:3000")
	grafana := fs.String("grafana-url", "", "Grafana dashboard the web dashboard links to, e.g. http://127.0.0.1:3000/d/grpo")
	verbose := fs.Bool("verbose", false, "log at debug level")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *grafana != "" {
		if err := checkURL("grafana-url", *grafana, "http://127.0.0.1:3000/d/grpo"); err != nil {
			return err
		}
	}
	token := m.Getenv(*tokenEnv)
	if token == "" && !server.Loopback(*addr) {
		return usagef("--addr %s is not loopback: set a bearer token in $%s (or name another variable with --token-env)", *addr, *tokenEnv)
	}
	if *dataDir == "" {
		*dataDir = *db + ".data"
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(m.Stderr, &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for i, o := range origins {
		origins[i] = strings.TrimRight(o, "/")
	}
	s := server.New(server.Options{
		Store: checkpoint.New(*db, checkpoint.Options{}), DataDir: *dataDir, Registry: reg,
		Logger: logger, Token: token, Addr: *addr, AllowedOrigins: origins, Getenv: m.Getenv,
		GrafanaURL: *grafana,
	})
	if err := s.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(m.Stderr, "grpo serve: listening on %s (store %s, data %s)\n", s.URL(), *db, *dataDir)
	<-ctx.Done()
	fmt.Fprintln(m.Stderr, "grpo serve: stopping runs; they resume on the next start")
	s.Close()
	return nil
}
