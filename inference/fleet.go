package inference

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Fleet is the set of endpoints (replicas) serving one run. Adapter
// operations go to every endpoint at once. Inplace mirrors the run's
// adapters.naming: with "inplace" every step reloads one adapter name.
type Fleet struct {
	Endpoints []*AdminClient
	Inplace   bool
}

// LoadEverywhere loads the adapter on every endpoint. An endpoint that
// already has an adapter of that name counts as loaded, so a step can be
// retried after a partial failure.
func (f *Fleet) LoadEverywhere(ctx context.Context, name, path string) error {
	errs := f.each(ctx, func(ctx context.Context, c *AdminClient) error {
		err := c.LoadAdapter(ctx, name, path, f.Inplace)
		if errors.Is(err, ErrAdapterExists) {
			return nil
		}
		return err
	})
	return joinFailures(errs)
}

// UnloadEverywhere unloads the adapter from every endpoint. An endpoint
// that does not have it counts as done.
func (f *Fleet) UnloadEverywhere(ctx context.Context, name string) error {
	errs := f.each(ctx, func(ctx context.Context, c *AdminClient) error {
		err := c.UnloadAdapter(ctx, name)
		if errors.Is(err, ErrAdapterNotFound) {
			return nil
		}
		return err
	})
	return joinFailures(errs)
}

// Healthy checks every endpoint's health. The result has one entry per
// endpoint, in order: nil where the endpoint is healthy, else an error
// naming it. Nothing calls it yet: the fleet work (draining an endpoint
// that fails and readmitting it) will.
func (f *Fleet) Healthy(ctx context.Context) []error {
	return f.each(ctx, func(ctx context.Context, c *AdminClient) error {
		if err := c.Health(ctx); err != nil {
			return fmt.Errorf("endpoint %s: %w", c.URL(), err)
		}
		return nil
	})
}

// each runs fn on every endpoint concurrently and returns its results in
// endpoint order.
func (f *Fleet) each(ctx context.Context, fn func(context.Context, *AdminClient) error) []error {
	errs := make([]error, len(f.Endpoints))
	var wg sync.WaitGroup
	for i, c := range f.Endpoints {
		wg.Go(func() { errs[i] = fn(ctx, c) })
	}
	wg.Wait()
	return errs
}

// joinFailures reports the failed endpoints of one operation, or nil; each
// error names its endpoint.
func joinFailures(errs []error) error {
	var failed []error
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("failed on %d of %d endpoints: %w", len(failed), len(errs), errors.Join(failed...))
}
