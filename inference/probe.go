package inference

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// probeRounds is how many times Probe asks an endpoint that fails
// transiently (each time with the admin client's retries).
const probeRounds = 4

// maxProbes bounds the probes (and ListModels requests) in flight at
// once: every endpoint a config may list (inference.endpoints holds at
// most 256), each a connection.
const maxProbes = 256

// Probe checks that the endpoint is an OpenAI-compatible server: GET
// {base}/models must answer a JSON model list. The error names the URL and
// what was expected, so a user can fix a config that points at the wrong
// port or forgot the /v1. It sends the client's API key.
func (c *AdminClient) Probe(ctx context.Context) error {
	_, err := c.probe(ctx)
	return err
}

// probe is Probe, returning the models listed.
func (c *AdminClient) probe(ctx context.Context) ([]Model, error) {
	models, err := c.models(ctx)
	if err != nil {
		if states(err, c.base) { // its request's URL: "GET URL/models: ..."
			return nil, fmt.Errorf("probe: %w", err)
		}
		return nil, fmt.Errorf("probe %s: %w", c.base, err)
	}
	return models, nil
}

// Start begins the fleet's probe loop, until Close: every ProbeInterval
// it checks every endpoint's GET /health (Healthy), drains a live one
// that fails (unless it is the only live one), readmits a drained one that answers (after its probe delay,
// loading the fleet's adapters first), and adapts each live endpoint's
// concurrency to its vLLM /metrics. Calling it again does nothing.
func (f *Fleet) Start(ctx context.Context) {
	f.startOnce.Do(func() {
		ctx, f.cancel = context.WithCancel(ctx)
		f.wg.Go(func() {
			t := time.NewTicker(f.opts.ProbeInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					f.Tick(ctx)
				}
			}
		})
	})
}

// Close stops the probe loop, waits for it, and deletes the series of the
// fleet's endpoints from FleetOptions.Metrics (their run is over). Safe
// to call twice, and without Start.
func (f *Fleet) Close() {
	f.closeOnce.Do(func() {
		f.startOnce.Do(func() {}) // a later Start does nothing
		if f.cancel != nil {
			f.cancel()
		}
		f.wg.Wait()
		for _, ep := range f.eps {
			f.opts.Metrics.forget(f.opts.Run, ep.url)
		}
	})
}

// Tick runs one round of the probe loop: health, readmission, and
// concurrency from /metrics. The probe loop calls it; tests call it to
// step the fleet.
func (f *Fleet) Tick(ctx context.Context) {
	// Probes are bounded; a readmission is not, beyond the admin client's
	// own timeouts: loading a real adapter takes seconds.
	pctx, cancel := context.WithTimeout(ctx, max(f.opts.ProbeInterval, 5*time.Second))
	defer cancel()
	health := f.health(pctx)
	for i, err := range health {
		// An OpenAI-compatible server without vLLM's /health (404) is
		// judged by its requests alone.
		var ae *AdminError
		if errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound {
			health[i] = nil
		}
	}
	var wg sync.WaitGroup
	for i, ep := range f.eps {
		f.mu.Lock()
		live, due := ep.live, !ep.live && !f.now().Before(ep.retryAt)
		f.mu.Unlock()
		switch {
		case live && health[i] != nil && !f.onlyLive(ep):
			f.drain(ep, -1, health[i])
		case live:
			wg.Go(func() { f.adapt(pctx, ep) })
		case due && health[i] == nil:
			wg.Go(func() { f.readmit(ctx, ep) })
		case due:
			f.mu.Lock()
			ep.lastErr = health[i]
			ep.retryAt = f.now().Add(f.opts.ProbeInterval)
			f.mu.Unlock()
		}
	}
	wg.Wait()
}

// onlyLive reports whether ep is live and no other endpoint is. The only
// live endpoint is not drained on a failed health check: its requests
// judge it (they are retried there within the retry budget, then drain
// it), so a scattered fault on /health does not stop every request.
func (f *Fleet) onlyLive(ep *endpoint) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !ep.live {
		return false
	}
	for _, o := range f.eps {
		if o != ep && o.live {
			return false
		}
	}
	return true
}

// adapt reads the endpoint's queue and moves its concurrency limit. A
// server without vLLM's gauges keeps its limit.
func (f *Fleet) adapt(ctx context.Context, ep *endpoint) {
	s, err := ep.admin.Load(ctx)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ep.limit = f.aimd.next(ep.limit, s, ep.peak >= ep.limit)
	ep.peak = ep.inflight
	ep.m.setLimit(ep.limit)
	f.signalLocked()
}

// readmit loads the fleet's adapters on a drained endpoint that answers
// its health check, then lets it take requests. An endpoint whose load
// fails stays drained and is probed again later.
func (f *Fleet) readmit(ctx context.Context, ep *endpoint) {
	f.adMu.Lock()
	defer f.adMu.Unlock()
	notReadmitted := func(err error, attrs ...any) {
		f.mu.Lock()
		ep.lastErr = err
		backoff := f.opts.ProbeInterval << min(ep.drains, 5)
		ep.retryAt = f.now().Add(backoff)
		f.mu.Unlock()
		f.opts.Logger.Warn("inference endpoint not readmitted", append([]any{"endpoint", ep.url, "err", err}, attrs...)...)
	}
	if err := f.checkBase(ctx, ep); err != nil {
		notReadmitted(err)
		return
	}
	clear(ep.loaded)
	for _, a := range f.adapters {
		if err := f.loadOn(ctx, ep, a.name, a.path); err != nil {
			notReadmitted(err, "adapter", a.name)
			return
		}
		ep.loaded[a.name] = a.path
	}
	f.mu.Lock()
	ep.live = true
	ep.ctx, ep.cancel = context.WithCancel(context.Background())
	ep.peak = 0
	ep.m.setUp(true)
	ep.m.readmitted()
	f.signalLocked()
	ep.changes++
	change := ep.changes
	f.mu.Unlock()
	f.opts.Logger.Info("inference endpoint readmitted", "endpoint", ep.url, "adapters", len(f.adapters))
	f.changedEndpoint(ep, change, EndpointChange{URL: ep.url, Up: true})
}

// checkBase refuses to readmit ep (with adMu held) when it no longer
// serves FleetOptions.Model as before: GET /v1/models does not list it
// though an endpoint of the fleet did, or lists it from another root than
// ep did (a replica restarted with another model, or other weights under
// the same name). Readmitted, it would answer the run's requests with
// another policy than the others, and take adapters trained on another
// base. A server that lists no such name (llama.cpp answers any) is not
// held to it.
func (f *Fleet) checkBase(ctx context.Context, ep *endpoint) error {
	model := f.opts.Model
	if model == "" {
		return nil
	}
	models, err := ep.admin.Models(ctx)
	if err != nil {
		return err
	}
	var ids []string
	for _, m := range models {
		if m.Parent != nil && *m.Parent != "" {
			continue // an adapter
		}
		if m.ID != model {
			ids = append(ids, m.ID)
			continue
		}
		if ep.baseRoot != "" && m.Root != "" && m.Root != ep.baseRoot {
			return fmt.Errorf("serves %s from %s now, not from %s as when the run saw it first (restarted with other weights under that name?): it stays drained until it serves %s from %s again", model, m.Root, ep.baseRoot, model, ep.baseRoot)
		}
		f.sawBase(ep, models)
		return nil
	}
	if !f.listed {
		return nil
	}
	serves := "no model"
	if len(ids) > 0 {
		serves = strings.Join(ids, ", ")
	}
	return fmt.Errorf("no longer lists inference.model %s (it serves %s; restarted with another model?): it stays drained until it serves %s again", model, serves, model)
}

// sawBase records (with adMu held) the root ep lists FleetOptions.Model
// with, if it lists it.
func (f *Fleet) sawBase(ep *endpoint, models []Model) {
	for _, m := range models {
		if m.Parent != nil && *m.Parent != "" {
			continue // an adapter of that name is not the base model (checkBase)
		}
		if f.opts.Model != "" && m.ID == f.opts.Model {
			f.listed = true
			if m.Root != "" {
				ep.baseRoot = m.Root
			}
		}
	}
}

// Probe checks every endpoint as AdminClient.Probe does, before a run
// starts, all of them at once (at most maxProbes in flight) within ctx's
// deadline (the start's one deadline: an endpoint adds no time of its
// own). An endpoint that cannot be reached (refused, reset), answers
// 429/5xx, or has not answered when the deadline passes (it accepts
// connections and hangs) is drained, to be probed back once Start runs,
// so that a run can start with replicas down; one that answers but is not
// an OpenAI-compatible server is a config error. It fails when no endpoint answers, naming each, or when ctx is
// cancelled. What the endpoints list is kept for Models.
func (f *Fleet) Probe(ctx context.Context) error {
	var within string
	if d, ok := ctx.Deadline(); ok {
		within = " within " + time.Until(d).Round(time.Second).String()
	}
	errs := make([]error, len(f.eps))
	listed := make([][]Model, len(f.eps))
	slots := make(chan struct{}, maxProbes)
	var wg sync.WaitGroup
	for i, ep := range f.eps {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			case <-ctx.Done():
				errs[i] = fmt.Errorf("probe %s: not probed: %w", ep.url, ctx.Err())
				return
			}
			// A server that answers but fails transiently (5xx, a reset)
			// is there: a few more rounds of the client's retries keep a
			// scattered fault from failing the start. One that refuses
			// connections is down now.
			for round := 0; ; round++ {
				listed[i], errs[i] = ep.admin.probe(ctx)
				if errs[i] == nil || round == probeRounds-1 || ctx.Err() != nil ||
					!endpointFailure(errs[i]) || errors.Is(errs[i], syscall.ECONNREFUSED) {
					break
				}
			}
			if errors.Is(errs[i], context.DeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				errs[i] = fmt.Errorf("%w: no answer%s", errs[i], within)
			}
		})
	}
	wg.Wait()
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("probe inference endpoints: %w", ctx.Err())
	}
	var down []error
	var models []Model
	for i, err := range errs {
		switch {
		case err == nil:
			f.adMu.Lock()
			f.sawBase(f.eps[i], listed[i])
			f.adMu.Unlock()
			models = append(models, listed[i]...)
		case endpointFailure(err) || errors.Is(err, context.DeadlineExceeded):
			down = append(down, err)
			f.drain(f.eps[i], -1, err)
		default:
			return err
		}
	}
	if len(down) == len(f.eps) {
		return errors.Join(down...)
	}
	f.adMu.Lock()
	f.probed = models
	f.adMu.Unlock()
	for _, err := range down {
		f.opts.Logger.Warn("inference endpoint does not answer; starting without it", "err", err)
	}
	return nil
}

// Models is what the endpoints that answered Probe listed (GET
// /v1/models), in endpoint order: the models a run starts with.
func (f *Fleet) Models() []Model {
	f.adMu.Lock()
	defer f.adMu.Unlock()
	return slices.Clone(f.probed)
}

// ListModels asks every client for its models (GET /v1/models) at once
// and returns what they list, in client order; one that cannot list them
// adds none. ctx bounds the whole.
func ListModels(ctx context.Context, clients []*AdminClient) []Model {
	listed := make([][]Model, len(clients))
	slots := make(chan struct{}, maxProbes)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			listed[i], _ = c.Models(ctx)
		})
	}
	wg.Wait()
	return slices.Concat(listed...)
}
