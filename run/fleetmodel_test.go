package run

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/inference"
)

// TestNewFleetHoldsEndpointsToTheModel: a fleet built by newFleet (a
// run's, grpo eval --run's) readmits a drained endpoint only while it
// still lists inference.model as it did: one back with another model
// stays drained.
func TestNewFleetHoldsEndpointsToTheModel(t *testing.T) {
	endpoint := func(down, other *atomic.Bool) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/health" && down != nil && down.Load():
				w.WriteHeader(http.StatusServiceUnavailable)
			case r.URL.Path == "/v1/models":
				w.Header().Set("Content-Type", "application/json")
				id := "m"
				if other != nil && other.Load() {
					id = "other"
				}
				fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","root":"/w/%s"}]}`, id, id)
			}
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	var down, other atomic.Bool
	a, b := endpoint(nil, nil), endpoint(&down, &other)
	inf := config.Default().Inference
	inf.Model = "m"
	f := newFleet([]Endpoint{{URL: a.URL + "/v1"}, {URL: b.URL + "/v1"}}, inf, nil, inference.FleetOptions{ProbeInterval: time.Millisecond})
	t.Cleanup(f.Close)
	ctx := context.Background()
	if err := f.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	f.Tick(ctx)
	if got, want := f.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("after a failed health probe: Live()=%v, want %v", got, want)
	}
	down.Store(false)
	other.Store(true)
	time.Sleep(10 * time.Millisecond) // past the retry delay
	f.Tick(ctx)
	if got, want := f.Live(), []bool{true, false}; !slices.Equal(got, want) {
		t.Fatalf("back serving another model: Live()=%v, want %v", got, want)
	}
	other.Store(false)
	time.Sleep(10 * time.Millisecond)
	f.Tick(ctx)
	if got, want := f.Live(), []bool{true, true}; !slices.Equal(got, want) {
		t.Fatalf("back serving the model: Live()=%v, want %v", got, want)
	}
}
