package promote

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
)

// DefaultName is the stable name a run's checkpoint is promoted under
// unless told otherwise: "<run>-best".
func DefaultName(run string) string { return run + "-best" }

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$`)

// runAdapterRE matches the names runs give their own adapters
// (RUN.ID-step-0003 per step, RUN.ID in place): a stable name of that form
// would replace a run's adapter on the endpoints, and every later
// measurement of that step would measure another one.
var runAdapterRE = regexp.MustCompile(`(-step-[0-9]{4,}|\.[0-9a-f]{16})$`)

// ValidateName checks a stable name: 1 to 200 characters, letters, digits
// and . _ : / -, starting with a letter or digit, and not of the form of a
// run's own adapter names.
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("name %q: want 1 to 200 characters of letters, digits and . _ : / -, starting with a letter or digit", name)
	}
	if runAdapterRE.MatchString(name) {
		return fmt.Errorf("name %q has the form of a run's own adapter names (RUN.ID-step-NNNN, RUN.ID), which promoting would replace on the endpoints: choose another name", name)
	}
	return nil
}

// ErrBaseModelName is returned by Promote for a stable name that is the
// run's base model's (inference.model or trainer.base_model): an adapter
// loaded under it would shadow the base model for every client of the
// endpoints (the run's own requests too), or be shadowed by it.
var ErrBaseModelName = errors.New("is the base model's name")

// CheckName refuses a stable name that is cfg's base model's name, with
// an error matching ErrBaseModelName; ValidateName checks its form.
func CheckName(name string, cfg config.Config) error {
	if name == cfg.Inference.Model || name == cfg.Trainer.BaseModel {
		return fmt.Errorf("name %q %w the run calls (inference.model %q, trainer.base_model %q): an adapter loaded under it would shadow the base model for every client of the endpoints, or be shadowed by it; choose another name (default RUN-best)", name, ErrBaseModelName, cfg.Inference.Model, cfg.Trainer.BaseModel)
	}
	return nil
}

// ErrNoEndpoints: there is no live inference endpoint to promote into (a
// run on the embedded backend, whose inference server stopped with the
// run, or on ART, whose vLLM the run does not name: see run.Admins).
var ErrNoEndpoints = errors.New("no live inference endpoint")

// What Promote did on one endpoint.
const (
	ActionLoaded   = "loaded"   // the name was not served: loaded
	ActionReplaced = "replaced" // the name was served: replaced in place (load_inplace)
	ActionReloaded = "reloaded" // the server refused load_inplace: unloaded, then loaded
	ActionFailed   = "failed"
)

// Result is what Promote did. Its JSON field names are printed by `grpo
// promote --json` and served by POST /api/v1/runs/{id}/promote.
type Result struct {
	Run        string             `json:"run"`
	Name       string             `json:"name"` // the stable name clients call
	Step       int                `json:"step"`
	SelectedBy string             `json:"selected_by"`
	Adapter    checkpoint.Adapter `json:"adapter"` // the step's adapter, as the run recorded it
	Endpoints  []EndpointResult   `json:"endpoints"`
}

// EndpointResult is one endpoint's outcome.
type EndpointResult struct {
	URL    string `json:"url"`
	Action string `json:"action"`           // loaded | replaced | reloaded | failed
	Before string `json:"before,omitempty"` // the path the name was served from before, when the server said
	Error  string `json:"error,omitempty"`  // with failed
	Served string `json:"served,omitempty"` // the path the server reports for the name afterwards
}

// Promote loads cp's adapter into every endpoint under name: in place
// (load_inplace) where the name is already served, falling back to unload
// and load where the server does not honour in-place loading. The
// endpoints are handled concurrently; the Result lists each, and the
// error names every endpoint that failed. The base model has no adapter:
// that is an error matching ErrNoAdapter and nothing is sent; nor is
// anything sent under the base model's name (ErrBaseModelName).
func Promote(ctx context.Context, endpoints []*inference.AdminClient, name string, cp Checkpoint) (Result, error) {
	res := Result{Run: cp.Run.Name, Name: name, Step: cp.Step.Step, SelectedBy: cp.SelectedBy}
	if err := ValidateName(name); err != nil {
		return res, err
	}
	if err := CheckName(name, cp.Config); err != nil {
		return res, err
	}
	a := cp.Adapter()
	if a == nil {
		return res, fmt.Errorf("run %s step %d is the base model (%s): %w to load; call the base model directly, or promote another step", cp.Run.Name, cp.Step.Step, cp.Config.Inference.Model, ErrNoAdapter)
	}
	res.Adapter = *a
	if len(endpoints) == 0 {
		return res, fmt.Errorf("promote %s: %w", name, ErrNoEndpoints)
	}
	res.Endpoints = make([]EndpointResult, len(endpoints))
	var wg sync.WaitGroup
	for i, c := range endpoints {
		wg.Go(func() { res.Endpoints[i] = promoteOne(ctx, c, name, a.Path) })
	}
	wg.Wait()
	var failed []error
	for _, e := range res.Endpoints {
		if e.Action == ActionFailed {
			failed = append(failed, fmt.Errorf("endpoint %s: %s", e.URL, e.Error))
		}
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("promote %s: failed on %d of %d endpoints: %w", name, len(failed), len(endpoints), errors.Join(failed...))
	}
	return res, nil
}

func promoteOne(ctx context.Context, c *inference.AdminClient, name, path string) EndpointResult {
	r := EndpointResult{URL: c.URL()}
	fail := func(err error) EndpointResult {
		r.Action, r.Error = ActionFailed, err.Error()
		return r
	}
	before, served, err := servedPath(ctx, c, name)
	if err != nil {
		return fail(err)
	}
	r.Before = before
	reload := func() error {
		if err := c.UnloadAdapter(ctx, name); err != nil && !errors.Is(err, inference.ErrAdapterNotFound) {
			return err
		}
		return c.LoadAdapter(ctx, name, path, false)
	}
	switch err := c.LoadAdapter(ctx, name, path, served); {
	case err == nil && served:
		r.Action = ActionReplaced
	case err == nil:
		r.Action = ActionLoaded
	case errors.Is(err, inference.ErrAdapterExists):
		// The server kept the old adapter: it does not honour
		// load_inplace (or the name appeared meanwhile). Replace it.
		if err := reload(); err != nil {
			return fail(err)
		}
		r.Action = ActionReloaded
	default:
		return fail(err)
	}
	after, ok, err := servedPath(ctx, c, name)
	if err == nil && ok && served && r.Action == ActionReplaced && after != "" && after == before && before != path {
		// Accepted, but ignored: the server answered 200 to load_inplace
		// and still serves the old path.
		if err := reload(); err != nil {
			return fail(err)
		}
		r.Action = ActionReloaded
		after, ok, err = servedPath(ctx, c, name)
	}
	switch {
	case err != nil:
		return fail(fmt.Errorf("after loading: %w", err))
	case !ok:
		return fail(fmt.Errorf("after loading, %s is not in the server's model list", name))
	case after != "" && after != path:
		return fail(fmt.Errorf("after loading, the server still serves %s from %s, not %s", name, after, path))
	}
	r.Served = after
	return r
}

// servedPath reports whether the endpoint serves name and the path (root)
// it gives for it, which may be empty.
func servedPath(ctx context.Context, c *inference.AdminClient, name string) (string, bool, error) {
	m, ok, err := c.Adapter(ctx, name)
	return m.Root, ok, err
}
