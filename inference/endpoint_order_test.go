package inference

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// hookHandler is a slog handler that calls on with each record's message.
type hookHandler struct{ on func(msg string) }

func (h hookHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h hookHandler) Handle(_ context.Context, r slog.Record) error {
	h.on(r.Message)
	return nil
}
func (h hookHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h hookHandler) WithGroup(string) slog.Handler      { return h }

// TestPool_EndpointChangesToldInOrder: an endpoint readmitted and drained
// again at once (a request it took failed) is last told drained, as it
// is: OnEndpoint is called after the fleet's lock is released, and the
// readmission's call came after the drain's.
func TestPool_EndpointChangesToldInOrder(t *testing.T) {
	_, sa := newFakeVLLM(t)
	b, sb := newFakeVLLM(t)
	var f *Fleet
	var once sync.Once
	var mu sync.Mutex
	var told []bool // B's changes, Up, in the order told
	logger := slog.New(hookHandler{on: func(msg string) {
		if msg == "inference endpoint readmitted" {
			// A request sent to B as soon as it is live fails: B is
			// drained before the readmission is told.
			once.Do(func() { f.drain(f.eps[1], -1, errors.New("connection reset")) })
		}
	}})
	f = testFleet(t, FleetOptions{Logger: logger, OnEndpoint: func(c EndpointChange) {
		if c.URL == sb.URL+"/v1" {
			mu.Lock()
			told = append(told, c.Up)
			mu.Unlock()
		}
	}}, sa.URL, sb.URL)
	ctx := context.Background()
	b.set(func(f *fakeVLLM) { f.health = http.StatusServiceUnavailable })
	f.Tick(ctx)
	b.set(func(f *fakeVLLM) { f.health = 0 })
	time.Sleep(2 * time.Millisecond) // past the probe delay
	f.Tick(ctx)
	if got := f.Live(); !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("Live()=%v, want B drained again", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) == 0 || told[len(told)-1] {
		t.Fatalf("B's changes told (up): %v; the last says B is up, but it is drained", told)
	}
}
