package server_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpo-dev/grpo/server"
)

// TestCreateWithAnEndpointDown: a run posted with two inference endpoints,
// one of which does not answer, starts on the other; the fleet reports the
// drained endpoint (endpoint_state) before the run's record is stored, and
// the POST must still answer 201 with the run, not 404 "no such run".
func TestCreateWithAnEndpointDown(t *testing.T) {
	b := refBackend(t)
	ref := httptest.NewServer(b.Handler())
	defer ref.Close()
	// A loopback address nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String() + "/v1"
	l.Close()

	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	cfg := `run: {name: twoends, steps: 1}
inference:
  endpoints: [{url: ` + ref.URL + `/v1}, {url: ` + dead + `}]
  model: refmodel
trainer: {kind: jobs, url: ` + ref.URL + `, base_model: refmodel, hyperparameters: {learning_rate: 1.0}}
validation: {episodes: 2}
`
	code, body := do(t, "POST", s.URL()+"/api/v1/runs", "", cfg)
	if code != http.StatusCreated {
		t.Fatalf("POST /api/v1/runs with one endpoint down = %d %s, want 201", code, body)
	}
	var r runJSON
	if err := json.Unmarshal(body, &r); err != nil || r.Run != "twoends" {
		t.Fatalf("answer %s (%v), want the run twoends", body, err)
	}
	waitRun(t, s.URL(), "twoends", "finished", finished)
}

// TestCreateWithAnEndpointHung: the same with an endpoint that accepts
// connections and never answers: the start's probe drains it when its
// deadline passes and the run starts on the other (it was a 502).
func TestCreateWithAnEndpointHung(t *testing.T) {
	b := refBackend(t)
	ref := httptest.NewServer(b.Handler())
	defer ref.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	defer func() {
		l.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	}()
	hung := "http://" + l.Addr().String() + "/v1"

	e := newEnv(t)
	s := e.MustStart(t, server.Options{})
	cfg := `run: {name: hungend, steps: 1}
inference:
  endpoints: [{url: ` + hung + `}, {url: ` + ref.URL + `/v1}]
  model: refmodel
trainer: {kind: jobs, url: ` + ref.URL + `, base_model: refmodel, hyperparameters: {learning_rate: 1.0}}
validation: {episodes: 2}
`
	code, body := do(t, "POST", s.URL()+"/api/v1/runs", "", cfg)
	if code != http.StatusCreated {
		t.Fatalf("POST /api/v1/runs with one endpoint hung = %d %s, want 201", code, body)
	}
	r := waitRun(t, s.URL(), "hungend", "finished", finished)
	if r.State != "succeeded" {
		t.Fatalf("run hungend %s, want succeeded", r.State)
	}
}
