package refmodel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure a Backend.
type Options struct {
	// DataDir holds the trainer's state: adapters/<name>/ for the adapters
	// jobs write, jobs/ for the job records. Required.
	DataDir string
	// Seed seeds sampling for requests without a seed and the initial
	// adapters of jobs without a parent.
	Seed int64
	// Logger receives operational logs; nil discards them.
	Logger *slog.Logger
	// Strict, when set, makes the inference server behave like vLLM
	// where grpo could go wrong (see Strict); nil is lenient.
	Strict *Strict
	// BaseCoordination is the base policy's strength (NewBase): 0, the
	// default, is the poor coordinator of DESIGN §8; -1 to 1. The served
	// base and the trainer's W0 both use it.
	BaseCoordination float64
}

// ErrClosed is returned when a closed Backend is opened again.
var ErrClosed = errors.New("refmodel: backend closed")

// Backend serves the reference policy (vLLM's OpenAI-compatible API) and
// trains it (the trainer job API). Create it with New, call Open, serve its
// handlers, and Close it.
type Backend struct {
	opts     Options
	logger   *slog.Logger
	registry *prometheus.Registry
	metrics  *serverMetrics
	models   *modelRegistry
	jobs     *jobManager
	draws    atomic.Uint64 // sampling draws of requests without a seed

	mu     sync.Mutex
	state  int // 0 new, 1 open, 2 closed
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates opts and returns an unopened Backend. It does no I/O.
func New(opts Options) (*Backend, error) {
	if opts.DataDir == "" {
		return nil, errors.New("refmodel: DataDir is required")
	}
	if err := opts.Strict.validate(); err != nil {
		return nil, err
	}
	base, err := NewBase(opts.BaseCoordination)
	if err != nil {
		return nil, fmt.Errorf("refmodel: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	b := &Backend{
		opts:     opts,
		logger:   logger,
		registry: reg,
		metrics:  newServerMetrics(reg),
		models:   newModelRegistry(base),
	}
	b.jobs = newJobManager(filepath.Join(opts.DataDir, "jobs"), b.AdapterDir, uint64(opts.Seed), base, logger)
	return b, nil
}

// AdapterDir is the directory a job writes the adapter called name to.
func (b *Backend) AdapterDir(name string) string {
	return filepath.Join(b.opts.DataDir, "adapters", name)
}

// Open creates the data directories, reloads the job records (finished jobs
// answer again; unfinished ones are queued to run again) and starts the
// training worker.
func (b *Backend) Open() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case 1:
		return errors.New("refmodel: backend already open")
	case 2:
		return ErrClosed
	}
	if err := b.jobs.open(); err != nil {
		return fmt.Errorf("open refmodel data dir %s: %w", b.opts.DataDir, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.jobs.run(ctx)
	}()
	b.state = 1
	return nil
}

// Close stops the training worker; a job it was running stays recorded as
// unfinished and runs again on the next Open. Close is safe to call twice.
func (b *Backend) Close() error {
	b.mu.Lock()
	cancel := b.cancel
	b.state, b.cancel = 2, nil
	b.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	b.wg.Wait()
	return nil
}

// InferenceHandler serves vLLM's OpenAI-compatible API:
// POST /v1/chat/completions, GET /v1/models, POST /v1/load_lora_adapter,
// POST /v1/unload_lora_adapter, GET /health and GET /metrics.
func (b *Backend) InferenceHandler() http.Handler {
	mux := http.NewServeMux()
	b.routeInference(mux)
	return mux
}

// TrainerHandler serves the trainer job API (DESIGN §5): POST /v1/jobs,
// GET and DELETE /v1/jobs/{id}, GET /healthz.
func (b *Backend) TrainerHandler() http.Handler {
	mux := http.NewServeMux()
	b.routeTrainer(mux)
	return mux
}

// Handler serves both APIs on one mux; their paths do not collide.
func (b *Backend) Handler() http.Handler {
	mux := http.NewServeMux()
	b.routeInference(mux)
	b.routeTrainer(mux)
	return mux
}

func (b *Backend) routeInference(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/chat/completions", b.handleChatCompletions)
	mux.HandleFunc("GET /v1/models", b.handleModels)
	mux.HandleFunc("POST /v1/load_lora_adapter", b.handleLoadAdapter)
	mux.HandleFunc("POST /v1/unload_lora_adapter", b.handleUnloadAdapter)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(b.registry, promhttp.HandlerOpts{}))
}

func (b *Backend) routeTrainer(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/jobs", b.handleCreateJob)
	mux.HandleFunc("GET /v1/jobs/{id...}", b.handleGetJob)
	mux.HandleFunc("DELETE /v1/jobs/{id...}", b.handleCancelJob)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeText(w, http.StatusOK, "ok\n") })
}

// Serve serves Handler on ln until ctx is done, then shuts the server down
// gracefully (in-flight requests get up to five seconds). It does not open
// or close the Backend.
func (b *Backend) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           b.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(b.logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("refmodel serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
		return fmt.Errorf("refmodel shutdown %s: %w", ln.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("refmodel serve %s: %w", ln.Addr(), err)
	}
	return nil
}
