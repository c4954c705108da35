package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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
  GET  /api/v1/runs/{id}/steps/{step}/transcripts   a step's validation replays
  POST /api/v1/runs/{id}/cancel  cancel
  POST /api/v1/runs/{id}/resume  play a failed, cancelled or orphaned run again ({"retry_job": true} optional)
  POST /api/v1/runs/{id}/promote load the selected adapter under a stable name
                                 (body {"as": NAME, "step": "best"|"last"|N})

{id} is the run name as one path segment: a name holding '/' (grpo
experiment's <experiment>/<arm>/<seed>) is percent-encoded, exp%2Farm%2F1.

A posted config cannot choose file paths: the daemon owns the store and
keeps each run's files under <data-dir>/<run>. Runs the store holds as
running are resumed at start; on SIGINT/SIGTERM the daemon stops its runs
so that the next start resumes them.

Mutating requests must send Content-Type application/json or
application/yaml, and a browser page may send them only from the daemon's
own origin or one allowed with --allow-origin; the Host header must name
the daemon (on loopback: its address, localhost or 127.0.0.1 with its
port, or a name allowed with --allow-host), so DNS rebinding fails.

A posted config cannot choose which environment variables the daemon
reads. Declare the inference endpoints and trainers in a peers file
(--peers peers.yaml):

  inference:
    vllm-a: {url: http://10.0.0.5:8000/v1, api_key_env: VLLM_A_KEY}
  trainers:
    jobs-1: {url: http://10.0.0.6:7000, kind: jobs, api_key_env: JOBS_1_KEY}

and name them in the config: inference.endpoints: [{peer: vllm-a}],
trainer: {peer: jobs-1}. A URL the config names itself gets no API key
(api_key_env is refused), and is refused outright with --peers-only.
The limits of a posted config (--max-n, --max-rounds, --max-episodes,
--max-steps, --max-step-size, --max-body) are checked before a run is
stored, and at most --max-runs runs play at once. At most --max-conns
connections are open at once (websocket streams count); past it a new one
waits, unanswered, until one closes or a timeout closes it. A run resumed
--max-failed-starts times in a row, the daemon dying each time before the
run committed a step, is marked failed instead of resumed again.

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
	var hosts listFlag
	fs.Var(&hosts, "allow-host", "name accepted in the Host header besides the bound address (repeatable), e.g. grpo.internal:8080")
	peersFile := fs.String("peers", "", "YAML file declaring the inference endpoints and trainers posted configs name ({peer: NAME})")
	peersOnly := fs.Bool("peers-only", false, "refuse any inference or trainer URL a posted config names itself")
	lim := config.DefaultLimits()
	fs.IntVar(&lim.MaxN, "max-n", lim.MaxN, "largest table size (env.n, validation.n, test.n, curriculum) a posted config may ask")
	fs.IntVar(&lim.MaxRounds, "max-rounds", lim.MaxRounds, "largest env.rounds a posted config may ask")
	fs.IntVar(&lim.MaxEpisodesPerStep, "max-episodes", lim.MaxEpisodesPerStep, "most episodes a step (or a validation or test size) may ask")
	fs.IntVar(&lim.MaxSteps, "max-steps", lim.MaxSteps, "largest run.steps a posted config may ask")
	fs.Int64Var(&lim.MaxStepSize, "max-step-size", lim.MaxStepSize, "largest episodes x philosophers x rounds^2 of a step's training episodes, a validation or the test split (memory grows so)")
	maxBody := fs.Int64("max-body", server.DefaultMaxBodyBytes, "largest posted config in bytes")
	maxRuns := fs.Int("max-runs", 8, "most runs playing at once")
	maxStreams := fs.Int("max-streams", server.DefaultMaxStreams, "most websocket event streams (dashboards, grpo watch) open at once")
	maxConns := fs.Int("max-conns", server.DefaultMaxConns, "most connections open at once, streams included (more than --max-streams); past it a new one waits until one closes")
	maxFailedStarts := fs.Int("max-failed-starts", server.DefaultMaxFailedStarts, "a run this daemon resumed this many times in a row, dying each time before the run committed a step, is marked failed at the next start instead of resumed")
	grafana := fs.String("grafana-url", "", "Grafana dashboard the web dashboard links to, e.g. http://127.0.0.1:3000/d/grpo")
	verbose := fs.Bool("verbose", false, "log at debug level")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	for name, v := range map[string]int64{"max-n": int64(lim.MaxN), "max-rounds": int64(lim.MaxRounds), "max-episodes": int64(lim.MaxEpisodesPerStep), "max-steps": int64(lim.MaxSteps), "max-step-size": lim.MaxStepSize, "max-body": *maxBody, "max-runs": int64(*maxRuns), "max-streams": int64(*maxStreams), "max-conns": int64(*maxConns), "max-failed-starts": int64(*maxFailedStarts)} {
		if v < 1 {
			return usagef("--%s %d: need at least 1", name, v)
		}
	}
	for name, v := range map[string][2]int{"max-n": {lim.MaxN, config.MachineLimits.MaxN}, "max-rounds": {lim.MaxRounds, config.MachineLimits.MaxRounds},
		"max-episodes": {lim.MaxEpisodesPerStep, config.MachineLimits.MaxEpisodesPerStep}} {
		if v[0] > v[1] {
			return usagef("--%s %d: at most %d (grpo's bound on any run)", name, v[0], v[1])
		}
	}
	if *maxConns <= *maxStreams {
		return usagef("--max-conns %d: need more than --max-streams %d, or the websocket streams could hold every connection and leave none for the API; raise --max-conns or lower --max-streams", *maxConns, *maxStreams)
	}
	var peers config.Peers
	if *peersFile != "" {
		p, err := config.LoadPeers(*peersFile)
		if err != nil {
			return usagef("--peers: %v", err)
		}
		peers = p
	}
	if *grafana != "" {
		if err := checkURL("grafana-url", *grafana, "http://127.0.0.1:3000/d/grpo"); err != nil {
			return err
		}
	}
	if _, port, err := net.SplitHostPort(*addr); err != nil || port == "" {
		return usagef("--addr %q: want HOST:PORT, e.g. 127.0.0.1:8080 (port 0: any free port)", *addr)
	}
	token := m.Getenv(*tokenEnv)
	if token != "" && strings.TrimSpace(token) != token {
		// A client's header cannot carry it: every mutating request
		// would be refused.
		return usagef("$%s begins or ends with white space, which no Authorization header can carry: remove it", *tokenEnv)
	}
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
		Logger: logger, Token: token, Addr: *addr, AllowedOrigins: origins, AllowedHosts: hosts, Getenv: m.Getenv,
		Peers: peers, PeersOnly: *peersOnly, Limits: lim, MaxBodyBytes: *maxBody, MaxRuns: *maxRuns, MaxStreams: *maxStreams, MaxConns: *maxConns,
		MaxFailedStarts: *maxFailedStarts,
		GrafanaURL:      *grafana,
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
