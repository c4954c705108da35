package inference

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// In-place loading strategies: how one adapter name is given new weights
// at every step (config inference.adapters.inplace).
const (
	// InplaceAuto sends load_inplace and, on an endpoint that does not
	// honour it (vLLM before the option answers 400 "already been loaded";
	// or /v1/models still shows the old root after the load), unloads and
	// loads instead from then on.
	InplaceAuto = "auto"
	// InplaceLoad sends load_inplace and fails where it is not honoured.
	InplaceLoad = "load_inplace"
	// InplaceReload always unloads and loads.
	InplaceReload = "reload"
)

// Fleet defaults.
const (
	DefaultOutageWindow  = 2 * time.Minute
	DefaultProbeInterval = 2 * time.Second
	DefaultConcurrency   = 64
)

// ErrNoEndpoint is wrapped by the error of a request or adapter load that
// found no live endpoint for the whole outage window.
var ErrNoEndpoint = errors.New("no live inference endpoint")

// ErrAdapterConflict: an endpoint already serves an adapter of that name
// from another path.
var ErrAdapterConflict = errors.New("adapter name already serves another path")

// Replica is one endpoint of a fleet: a chat client and an admin client
// of the same server.
type Replica struct {
	Chat  *ChatClient
	Admin *AdminClient
}

// FleetOptions configure a Fleet. Zero values take the defaults.
type FleetOptions struct {
	// Model, when set, is the base model the requests name
	// (inference.model): a drained endpoint is readmitted only while GET
	// /v1/models lists it as before, from the same root (see
	// Fleet.checkBase).
	Model string
	// Inplace, when set, means every step loads the same adapter name
	// (adapters.naming inplace), by InplaceAuto, InplaceLoad or
	// InplaceReload; empty means per-step names.
	Inplace string
	// Concurrency bounds requests in flight over the whole fleet
	// (inference.concurrency); default DefaultConcurrency.
	Concurrency int
	// OutageWindow is how long a request or an adapter load waits for an
	// endpoint to come back when none is live; default
	// DefaultOutageWindow, negative: no wait.
	OutageWindow time.Duration
	// ProbeInterval paces health probes, readmission probes and /metrics
	// readings; default DefaultProbeInterval.
	ProbeInterval time.Duration
	// Retry is the request-level retry of Complete: when a request fails
	// at the only live endpoint (after that endpoint's client retries),
	// it is sent there again after a wait from Retry's backoff, for as
	// long as Retry.Budget since its first failure allows; draining the
	// only endpoint would gain nothing. A zero Budget drains it at once
	// (the request then waits for the outage window). Retry.Retries is
	// not used: the budget alone bounds these resends.
	Retry httpx.Policy
	// LoadRetry paces the retries of a load that finds no adapter at its
	// path; default 6 retries from 250ms doubling to 5s.
	LoadRetry *httpx.Policy
	// Metrics, when set, receives the fleet's metrics, labelled Run.
	Metrics *FleetMetrics
	Run     string
	Logger  *slog.Logger
	// OnEndpoint, when set, is told each time an endpoint is drained or
	// readmitted, one call at a time and in the order of the changes (a
	// change already undone when it would be told is not told); it must
	// neither block for long nor call the fleet.
	OnEndpoint func(EndpointChange)
}

// EndpointChange is an endpoint drained (Up false: the error that drained
// it, when it is probed first, and how often from then on) or readmitted
// (Up true). A failed probe is not a change: the probes that follow
// ProbeIn are told once, as ProbeEvery.
type EndpointChange struct {
	URL     string
	Up      bool
	Err     error
	ProbeIn time.Duration
	// ProbeEvery is the fleet's ProbeInterval: a drained endpoint whose
	// health probe fails is probed again that much later. One that
	// answers but fails to load the run's adapters waits its backoff
	// again.
	ProbeEvery time.Duration
}

// Fleet is the set of endpoints (replicas serving the same models) of one
// run. It sends chat completions to a live endpoint (Complete), loads and
// unloads adapters on the live endpoints, drains an endpoint that fails
// and, once Start has been called, probes it back: a drained endpoint
// that answers GET /health again gets the fleet's current adapters loaded
// before it takes requests. Each endpoint's concurrency follows its vLLM
// queue (/metrics), within Concurrency overall. It is safe for concurrent
// use.
type Fleet struct {
	opts      FleetOptions
	eps       []*endpoint
	aimd      aimd
	loadRetry httpx.Policy
	now       func() time.Time

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced when capacity frees or an endpoint is readmitted
	waiting  int           // goroutines waiting on changed
	inflight int
	rr       int // rotates the first endpoint tried, to spread ties

	// adMu serialises adapter loads, unloads and readmissions, so an
	// endpoint readmitted during a load gets that adapter too.
	adMu     sync.Mutex
	adapters []loadedAdapter // the adapters every live endpoint serves, in load order
	listed   bool            // an endpoint listed FleetOptions.Model
	probed   []Model         // what the endpoints listed at Probe

	// tellMu serialises calls of FleetOptions.OnEndpoint.
	tellMu sync.Mutex

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	startOnce sync.Once
	closeOnce sync.Once
}

type loadedAdapter struct{ name, path string }

// endpoint is one replica and its state.
type endpoint struct {
	chat  *ChatClient
	admin *AdminClient
	url   string
	m     endpointMetrics

	// guarded by Fleet.mu
	live     bool
	epoch    int             // incremented at every drain
	ctx      context.Context // cancelled when drained: requests in flight go elsewhere
	cancel   context.CancelFunc
	inflight int
	peak     int // most in flight since the last /metrics reading
	limit    int
	lastErr  error
	retryAt  time.Time // earliest readmission probe
	drains   int       // consecutive drains without a success, for the probe backoff
	changes  int       // drains and readmissions so far, to tell them in order

	// guarded by Fleet.tellMu
	told int // the last change told to FleetOptions.OnEndpoint

	// guarded by Fleet.adMu
	loaded    map[string]string // adapter name -> path loaded here
	noInplace bool              // the server ignores load_inplace
	baseRoot  string            // the root it listed FleetOptions.Model with, once seen
}

// named is err naming ep: "endpoint URL: err", unless err names it
// already (the URL of a request to it, such as a chat completion's).
func (ep *endpoint) named(err error) error {
	if states(err, ep.url) {
		return err
	}
	return fmt.Errorf("endpoint %s: %w", ep.url, err)
}

// NewFleet returns a fleet of replicas (at least one). It does no I/O.
func NewFleet(replicas []Replica, opts FleetOptions) *Fleet {
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.OutageWindow == 0 {
		opts.OutageWindow = DefaultOutageWindow
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{opts: opts, aimd: newAIMD(opts.Concurrency), now: time.Now, changed: make(chan struct{})}
	f.loadRetry = httpx.Policy{Retries: 6, BaseDelay: 250 * time.Millisecond, MaxDelay: 5 * time.Second, Jitter: 0.5}
	if opts.LoadRetry != nil {
		f.loadRetry = *opts.LoadRetry
	}
	limit := f.aimd.initial(len(replicas))
	for _, r := range replicas {
		ep := &endpoint{chat: r.Chat, admin: r.Admin, live: true, limit: limit, loaded: map[string]string{}}
		ep.url = r.Admin.URL()
		ep.m = opts.Metrics.endpoint(opts.Run, ep.url)
		ep.ctx, ep.cancel = context.WithCancel(context.Background())
		ep.m.setUp(true)
		ep.m.setLimit(limit)
		f.eps = append(f.eps, ep)
	}
	return f
}

// Endpoints returns the endpoints' URLs, in order: the endpoint label of
// the fleet's metrics, as Complete reports it (Completion.Endpoint,
// EndpointError).
func (f *Fleet) Endpoints() []string {
	out := make([]string, len(f.eps))
	for i, ep := range f.eps {
		out[i] = ep.url
	}
	return out
}

// Live reports, per endpoint in order, whether it takes requests.
func (f *Fleet) Live() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]bool, len(f.eps))
	for i, ep := range f.eps {
		out[i] = ep.live
	}
	return out
}

// Limits reports each endpoint's concurrency limit, in order.
func (f *Fleet) Limits() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int, len(f.eps))
	for i, ep := range f.eps {
		out[i] = ep.limit
	}
	return out
}

// LoadEverywhere loads the adapter on every live endpoint and records it
// as one every endpoint readmitted later must load first. An endpoint
// that fails the load (unreachable, 5xx after retries) is drained, and so
// is one that refuses it (a 4xx) while another endpoint loaded it; the
// load fails when every live endpoint refuses the adapter, or when no
// endpoint is left for the whole outage window.
func (f *Fleet) LoadEverywhere(ctx context.Context, name, path string) error {
	f.adMu.Lock()
	defer f.adMu.Unlock()
	f.remember(name, path)
	var since time.Time
	for {
		var todo []*endpoint
		loaded := false
		for _, ep := range f.liveEndpoints() {
			if p, ok := ep.loaded[name]; ok && p == path {
				loaded = true
			} else {
				todo = append(todo, ep)
			}
		}
		if len(todo) == 0 && loaded {
			return nil
		}
		if len(todo) == 0 {
			if since.IsZero() {
				since = f.now()
			}
			// Readmission needs adMu to load this adapter too.
			f.adMu.Unlock()
			err := f.waitLive(ctx, since)
			f.adMu.Lock()
			if err != nil {
				return fmt.Errorf("load adapter %s: %w", name, err)
			}
			continue
		}
		errs := make([]error, len(todo))
		var wg sync.WaitGroup
		for i, ep := range todo {
			wg.Go(func() { errs[i] = f.loadOn(ctx, ep, name, path) })
		}
		wg.Wait()
		var refused []error
		var refusing []*endpoint
		for i, err := range errs {
			switch {
			case err == nil:
				todo[i].loaded[name] = path
				loaded = true
			case ctx.Err() != nil:
				return fmt.Errorf("load adapter %s: %w", name, ctx.Err())
			case endpointFailure(err):
				f.drain(todo[i], -1, err)
			default:
				refused = append(refused, err) // it names the adapter and the endpoint
				refusing = append(refusing, todo[i])
			}
		}
		switch {
		case len(refused) > 0 && !loaded:
			return errors.Join(refused...)
		case len(refused) > 0:
			// Another endpoint serves it: what refused it is that
			// endpoint's (a stale adapter of the name, a full adapter
			// slot), so it is drained, and readmitted once it takes the
			// fleet's adapters.
			for i, ep := range refusing {
				f.opts.Logger.Warn("inference endpoint refused an adapter the others loaded; draining it", "endpoint", ep.url, "adapter", name, "err", refused[i])
				f.drain(ep, -1, refused[i])
			}
		}
		if loaded {
			return nil
		}
	}
}

// UnloadEverywhere unloads the adapter from every live endpoint and
// forgets it; an endpoint that does not have it counts as done, one that
// fails is drained (it will not get the adapter back when readmitted).
func (f *Fleet) UnloadEverywhere(ctx context.Context, name string) error {
	f.adMu.Lock()
	defer f.adMu.Unlock()
	f.adapters = slices.DeleteFunc(f.adapters, func(a loadedAdapter) bool { return a.name == name })
	live := f.liveEndpoints()
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, ep := range live {
		wg.Go(func() {
			err := ep.admin.UnloadAdapter(ctx, name)
			if errors.Is(err, ErrAdapterNotFound) {
				err = nil
			}
			errs[i] = err
		})
	}
	wg.Wait()
	var failed []error
	for i, err := range errs {
		delete(live[i].loaded, name)
		switch {
		case err == nil:
		case ctx.Err() == nil && endpointFailure(err):
			f.drain(live[i], -1, err)
		default:
			failed = append(failed, live[i].named(err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("unload adapter %s: failed on %d of %d endpoints: %w", name, len(failed), len(live), errors.Join(failed...))
	}
	return nil
}

// Healthy checks every endpoint's health, live or drained. The result has
// one entry per endpoint, in order: nil where the endpoint is healthy,
// else an error naming it.
func (f *Fleet) Healthy(ctx context.Context) []error {
	errs := f.health(ctx)
	for i, err := range errs {
		if err != nil {
			errs[i] = f.eps[i].named(err)
		}
	}
	return errs
}

// health is Healthy without the endpoint's name in each error (its
// request's URL names the server): what drains an endpoint, told beside
// its URL in the log, the endpoint_state event and the outage's error.
func (f *Fleet) health(ctx context.Context) []error {
	errs := make([]error, len(f.eps))
	var wg sync.WaitGroup
	for i, ep := range f.eps {
		wg.Go(func() { errs[i] = ep.admin.Health(ctx) })
	}
	wg.Wait()
	return errs
}

// remember records name as served from path, replacing an earlier path
// (in-place naming) and making it the most recent.
func (f *Fleet) remember(name, path string) {
	f.adapters = slices.DeleteFunc(f.adapters, func(a loadedAdapter) bool { return a.name == name })
	f.adapters = append(f.adapters, loadedAdapter{name, path})
}

func (f *Fleet) liveEndpoints() []*endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*endpoint
	for _, ep := range f.eps {
		if ep.live {
			out = append(out, ep)
		}
	}
	return out
}

// loadOn loads the adapter on one endpoint by the fleet's naming: a
// per-step name already there counts only with the same root; an
// in-place name is replaced by load_inplace or by unload and load.
func (f *Fleet) loadOn(ctx context.Context, ep *endpoint, name, path string) error {
	switch mode := f.opts.Inplace; {
	case mode == "":
		err := f.load(ctx, ep, name, path, false)
		if !errors.Is(err, ErrAdapterExists) {
			return err
		}
		return f.checkRoot(ctx, ep, name, path)
	case mode == InplaceReload || mode == InplaceAuto && ep.noInplace:
		return f.reload(ctx, ep, name, path)
	case mode == InplaceLoad:
		err := f.load(ctx, ep, name, path, true)
		if errors.Is(err, ErrAdapterExists) {
			return fmt.Errorf("%w: the server ignores load_inplace (vLLM before the option); set inference.adapters.inplace to auto or reload", err)
		}
		return err
	default: // InplaceAuto
		err := f.load(ctx, ep, name, path, true)
		if err == nil {
			// A server that answers 200 yet kept the old weights shows
			// the old root. One that does not list the adapter, or lists
			// no root, cannot be checked: its 200 is taken at its word.
			m, ok, lerr := ep.admin.Adapter(ctx, name)
			if lerr != nil || !ok || m.Root == "" || m.Root == path {
				return nil
			}
		} else if !errors.Is(err, ErrAdapterExists) {
			return err
		}
		f.opts.Logger.Warn("endpoint ignores load_inplace; unloading and loading instead", "endpoint", ep.url, "adapter", name)
		ep.noInplace = true
		return f.reload(ctx, ep, name, path)
	}
}

// reload unloads name (if there) and loads it from path.
func (f *Fleet) reload(ctx context.Context, ep *endpoint, name, path string) error {
	if err := ep.admin.UnloadAdapter(ctx, name); err != nil && !errors.Is(err, ErrAdapterNotFound) {
		ep.m.load(LoadFailed)
		return err
	}
	if err := f.load(ctx, ep, name, path, false); err != nil {
		return err
	}
	ep.m.load(LoadReloaded)
	return nil
}

// checkRoot accepts an adapter already loaded under name only when GET
// /v1/models shows it with root path.
func (f *Fleet) checkRoot(ctx context.Context, ep *endpoint, name, path string) error {
	m, ok, err := ep.admin.Adapter(ctx, name)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("load adapter %s on %s: the server said it is loaded but GET /v1/models does not list it", name, ep.url)
	case m.Root != path:
		return fmt.Errorf("load adapter %s: %w: %s serves it from %q, not %q (unload it there, or name the run differently)", name, ErrAdapterConflict, ep.url, m.Root, path)
	}
	ep.m.load(LoadPresent)
	return nil
}

// load sends one load request, retried with backoff while the server
// finds no adapter at path (5xx are retried by the admin client's policy).
func (f *Fleet) load(ctx context.Context, ep *endpoint, name, path string, inplace bool) error {
	b := f.loadRetry.Backoff()
	for attempt := 0; ; attempt++ {
		err := ep.admin.LoadAdapter(ctx, name, path, inplace)
		switch {
		case err == nil:
			ep.m.load(LoadLoaded)
			return nil
		case errors.Is(err, ErrAdapterExists):
			return err
		case errors.Is(err, ErrAdapterPathNotFound) && attempt < f.loadRetry.Retries:
			ep.m.load(LoadNotFound)
			if werr := httpx.Sleep(ctx, b.Next(0)); werr != nil {
				return fmt.Errorf("%w; last error: %v", werr, err)
			}
		default:
			ep.m.load(LoadFailed)
			return err
		}
	}
}

// endpointFailure reports an error that is the endpoint's, not the
// request's: it could not be reached, timed out, answered 429/5xx or
// garbage after the client's retries.
func endpointFailure(err error) bool {
	var ge *GarbageError
	var ae *AdminError
	if errors.As(err, &ae) {
		c := ae.StatusCode
		return c == http.StatusTooManyRequests || (c >= 500 && c != http.StatusNotImplemented)
	}
	return httpx.IsTransient(err) || errors.As(err, &ge)
}
