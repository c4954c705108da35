package server_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/orchestrator"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/server"
)

// endpointOutage is a daemon playing run "outage" (400 steps, cancelled
// at cleanup) on two inference endpoints of a reference backend, the
// second of which nobody listens on yet.
type endpointOutage struct {
	s    *server.Server
	b    *refmodel.Backend
	dead string // the second endpoint's URL
	addr string // its host:port
}

func startOutage(t *testing.T) *endpointOutage {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ref := httptest.NewServer(b.Handler())
	t.Cleanup(ref.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	o := &endpointOutage{b: b, addr: addr, dead: "http://" + addr + "/v1"}
	o.s = newEnv(t).MustStart(t, server.Options{})
	cfg := `run: {name: outage, steps: 400}
inference:
  endpoints: [{url: ` + ref.URL + `/v1}, {url: ` + o.dead + `}]
  model: refmodel
trainer: {kind: jobs, url: ` + ref.URL + `, base_model: refmodel, hyperparameters: {learning_rate: 1.0}}
validation: {episodes: 2}
`
	if code, body := do(t, "POST", o.s.URL()+"/api/v1/runs", "", cfg); code != http.StatusCreated {
		t.Fatalf("POST /api/v1/runs = %d %s", code, body)
	}
	t.Cleanup(func() { do(t, "POST", o.s.URL()+"/api/v1/runs/outage/cancel", "", "") })
	return o
}

// revive serves the reference backend at the dead endpoint's address.
func (o *endpointOutage) revive(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", o.addr)
	if err != nil {
		t.Skipf("the dead endpoint's port %s was taken meanwhile: %v", o.addr, err)
	}
	srv := httptest.NewUnstartedServer(o.b.Handler())
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
}

// endpointsDown polls GET /api/v1/runs/outage until its endpoints_down
// has want entries.
func (o *endpointOutage) endpointsDown(t *testing.T, want int) []orchestrator.Event {
	t.Helper()
	var down []orchestrator.Event
	reached := testutil.Eventually(func() bool {
		var v struct {
			Hosted        bool                 `json:"hosted"`
			EndpointsDown []orchestrator.Event `json:"endpoints_down"`
		}
		code, body := do(t, "GET", o.s.URL()+"/api/v1/runs/outage", "", "")
		if code != http.StatusOK {
			t.Fatalf("GET /api/v1/runs/outage = %d %s", code, body)
		}
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("decode: %v\n%.300s", err, body)
		}
		if !v.Hosted {
			t.Fatalf("run outage no longer plays: %.300s", body)
		}
		down = v.EndpointsDown
		return len(down) == want
	})
	if !reached {
		t.Fatalf("endpoints_down has %d entries after %s, want %d: %+v", len(down), testutil.Patience, want, down)
	}
	return down
}

// TestRunShowsEndpointsDown: GET /api/v1/runs/{id} of a run playing in
// the daemon carries the endpoint_state event of each inference endpoint
// drained now, until it is readmitted: the dashboard re-reads them when
// its websocket reconnects, having maybe missed a readmission meanwhile.
func TestRunShowsEndpointsDown(t *testing.T) {
	o := startOutage(t)
	down := o.endpointsDown(t, 1)
	e := down[0]
	if e.Type != orchestrator.EventEndpointState || e.Run != "outage" || e.EndpointState == nil ||
		e.EndpointState.Endpoint != o.dead || e.EndpointState.Up || e.EndpointState.Error == "" || e.EndpointState.ProbeIn <= 0 || e.Time.IsZero() {
		t.Fatalf("endpoints_down[0] = %+v (%+v), want the drain of %s with its error, probe delay and time", e, e.EndpointState, o.dead)
	}
	o.revive(t)
	o.endpointsDown(t, 0)
}
