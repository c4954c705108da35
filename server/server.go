// Package server is the daemon behind `grpo serve` (DESIGN §9): an HTTP API
// that launches, lists, shows and cancels runs, each played by its own
// orchestrator; a websocket hub that streams run events; Prometheus metrics
// on /metrics; and a dashboard with live reward curves on /.
//
// # Shutdown and resume
//
// Close cancels every run and waits for it. A run interrupted by Close is
// left running (run.Options.Interrupted), so that the next daemon on the
// same store resumes it from its last committed step. A run cancelled through the API stays cancelled. A daemon killed
// without Close leaves its runs running, and the next one resumes them too.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultAddr is where the daemon listens unless told otherwise: loopback
// only, so that no token is needed.
const DefaultAddr = "127.0.0.1:8080"

// DefaultMaxBodyBytes bounds a posted config unless told otherwise.
const DefaultMaxBodyBytes = 1 << 20

// DefaultMaxStreams bounds the websocket event streams open at once.
const DefaultMaxStreams = 1024

// DefaultBodyTimeout bounds reading a request (its body included): a
// client that trickles it holds a connection no longer.
const DefaultBodyTimeout = 30 * time.Second

// DefaultWriteTimeout bounds the time from a request's start to the end
// of its answer (not a websocket's stream): a client that stops reading
// holds its connection, and its place under MaxConns, no longer. It is
// above the longest a handler works before it answers (a promotion's
// loads, 5 minutes).
const DefaultWriteTimeout = 10 * time.Minute

// Registry is where the daemon's metrics are registered and gathered from.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

var _ Registry = (*prometheus.Registry)(nil)

// Options configure a Server.
type Options struct {
	Store *checkpoint.Store
	// BodyTimeout bounds reading each request, its body included (not a
	// websocket's stream); zero means DefaultBodyTimeout.
	BodyTimeout time.Duration
	// WriteTimeout bounds the time from each request's start to the end of
	// its answer (not a websocket's stream); zero means
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
	// DataDir holds one directory per run (the embedded backend's adapters
	// and jobs): <DataDir>/<run>.
	DataDir string
	// Registry receives the metrics; nil means a new registry of its own.
	Registry Registry
	Logger   *slog.Logger
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// mutating endpoints. It is mandatory when Addr is not loopback.
	Token string
	// Addr is the listen address (default DefaultAddr).
	Addr string
	// AllowedOrigins are browser origins (e.g. "https://grafana.example")
	// allowed on /ws besides the daemon's own host.
	AllowedOrigins []string
	// AllowedHosts are names (host or host:port) accepted in the Host
	// header besides the bound address; on loopback also localhost,
	// 127.0.0.1 and [::1] with the bound port. See allowedHost.
	AllowedHosts []string
	// Getenv reads the API keys of declared peers (default os.Getenv).
	// Runs read only the variables Peers names; resumed runs too.
	Getenv func(string) string
	// Peers are the inference endpoints and trainers posted configs name
	// ({peer: NAME}); PeersOnly refuses any URL a config names itself.
	Peers     config.Peers
	PeersOnly bool
	// Limits bound a posted config (see config.Limits); the zero value is
	// no limit: use config.DefaultLimits().
	Limits config.Limits
	// MaxBodyBytes bounds a posted config (default 1 MiB).
	MaxBodyBytes int64
	// MaxRuns bounds the runs playing at once; a launch beyond it is
	// answered 429 (0: no limit). Resumed runs count too.
	MaxRuns int
	// MaxFailedStarts is how many times in a row a start of the daemon
	// resumes a run that then commits no step before the daemon dies (a
	// crash, out of memory, a kill); at the next start such a run is
	// marked failed instead of resumed into the same end (default
	// DefaultMaxFailedStarts; negative: no limit). A clean shutdown does
	// not count.
	MaxFailedStarts int
	// GrafanaURL, when set, is linked from the dashboard (its Grafana
	// dashboard, e.g. http://grafana:3000/d/grpo).
	GrafanaURL string
	// ClientBuffer bounds the events queued for one websocket client; a
	// client that falls this far behind is dropped (default 256).
	ClientBuffer int
	// MaxStreams bounds the websocket event streams open at once (each
	// holds a connection, a goroutine pair and ClientBuffer events);
	// zero means DefaultMaxStreams.
	MaxStreams int
	// MaxConns bounds the connections open at once, websocket streams
	// included; past it a new connection waits, unanswered, until one
	// closes. It must exceed MaxStreams, so that streams cannot hold
	// every connection. Zero means DefaultMaxConns.
	MaxConns int
	// ResumeRetry is how often a stored running run that another process
	// held at start is tried again (default 5 s).
	ResumeRetry time.Duration
}

// Server hosts runs. Its methods are safe for concurrent use.
type Server struct {
	opts    Options
	logger  *slog.Logger
	metrics *metrics
	hub     *hub
	handler http.Handler

	ctx    context.Context // parent of every run's context
	cancel context.CancelFunc

	mu        sync.Mutex
	runs      map[string]*hosted // runs playing in this process
	closing   bool
	boundAddr string // the listener's address, once started
	wg        sync.WaitGroup

	httpSrv *http.Server
	ln      net.Listener
	serveWG sync.WaitGroup
	once    sync.Once
}

// New returns a Server and registers its metrics. It does no I/O.
func New(opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	if opts.ClientBuffer <= 0 {
		opts.ClientBuffer = 256
	}
	if opts.ResumeRetry <= 0 {
		opts.ResumeRetry = 5 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxFailedStarts == 0 {
		opts.MaxFailedStarts = DefaultMaxFailedStarts
	}
	// A run reads only the variables the operator declared.
	declared, getenv := opts.Peers.APIKeyEnvs(), opts.Getenv
	opts.Getenv = func(name string) string {
		if slices.Contains(declared, name) {
			return getenv(name)
		}
		return ""
	}
	s := &Server{
		opts:    opts,
		logger:  opts.Logger,
		metrics: newMetrics(opts.Registry),
		hub:     newHub(opts.ClientBuffer, opts.MaxStreams),
		runs:    make(map[string]*hosted),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s
}

// ErrNoToken is returned by Start when the daemon would listen beyond
// loopback without a token.
var ErrNoToken = errors.New("a token is required to listen on a non-loopback address")

// Start checks the options, resumes the runs the store holds as running,
// and serves on Addr until Close.
func (s *Server) Start(ctx context.Context) error {
	if s.opts.Store == nil {
		return errors.New("server: no store")
	}
	if s.opts.DataDir == "" {
		return errors.New("server: no data directory")
	}
	if s.opts.Token == "" && !Loopback(s.opts.Addr) {
		return fmt.Errorf("listen on %s: %w", s.opts.Addr, ErrNoToken)
	}
	if s.opts.MaxConns <= s.opts.MaxStreams {
		return fmt.Errorf("at most %d connections (grpo serve --max-conns) with up to %d websocket streams (--max-streams) would let the streams hold every connection and leave none for the API: raise --max-conns or lower --max-streams", s.opts.MaxConns, s.opts.MaxStreams)
	}
	// Runs are written into the store: not into a damaged one.
	if err := s.opts.Store.Check(ctx); err != nil {
		return err
	}
	// Where runs write, found unusable now rather than at the first POST.
	if err := os.MkdirAll(s.opts.DataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(s.opts.Store.Path()), 0o755); err != nil {
		return fmt.Errorf("store directory: %w", err)
	}
	tcp, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Addr, err)
	}
	ln := newLimitListener(tcp, s.opts.MaxConns, s.logger)
	s.ln = ln
	s.mu.Lock()
	s.boundAddr = ln.Addr().String()
	s.mu.Unlock()
	// No ReadTimeout nor WriteTimeout: they would also cut websocket
	// connections. Other requests get their own read and write deadlines
	// (Options.BodyTimeout, Options.WriteTimeout). These timeouts close
	// the connections that hold ln's slots (MaxConns).
	s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		if err := s.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("serve", "addr", ln.Addr().String(), "err", err)
		}
	}()
	if err := s.metrics.restore(ctx, s.opts.Store); err != nil {
		s.logger.Warn("metrics of stored runs not exported", "err", err)
	}
	if err := s.resumeAll(ctx); err != nil {
		s.Close()
		return err
	}
	return nil
}

// URL is the base URL the server listens on, once started.
func (s *Server) URL() string {
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Close stops serving, cancels every run, waits for them, and records the
// runs it interrupted as running so that the next daemon resumes them.
// Safe to call twice.
func (s *Server) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		if s.httpSrv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			// Websocket connections are hijacked: the hub closes them.
			s.hub.close()
			if err := s.httpSrv.Shutdown(ctx); err != nil {
				s.httpSrv.Close()
			}
			cancel()
			s.serveWG.Wait()
		} else {
			s.hub.close()
		}
		s.cancel()
		s.wg.Wait()
	})
}

// Loopback reports whether addr (host:port) binds only loopback
// interfaces. An empty host means every interface, which is not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
