package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

func TestJobID(t *testing.T) {
	for _, tt := range []struct {
		run    string
		step   int
		id, ad string
	}{
		{"run", 3, "run/step-0003", "run-step-0003"},
		{"dp5-shaped", 0, "dp5-shaped/step-0000", "dp5-shaped-step-0000"},
		{"r", 12345, "r/step-12345", "r-step-12345"},
		{"exp/arm/1", 3, "exp/arm/1/step-0003", "exp.arm.1-step-0003"},
	} {
		if got, want := JobID(tt.run, tt.step), tt.id; got != want {
			t.Errorf("JobID(%q, %d)=%q, want %q", tt.run, tt.step, got, want)
		}
		if got, want := AdapterName(tt.run, tt.step), tt.ad; got != want {
			t.Errorf("AdapterName(%q, %d)=%q, want %q", tt.run, tt.step, got, want)
		}
	}
}

func TestJobClient_Submit_Idempotent(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateRunning, Progress: 0.5})
	c := NewJobClient(srv.URL+"/", fastOptions())
	ctx := context.Background()
	req := testRequest(JobID("dp5", 3))

	first, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := first, (Job{ID: "dp5/step-0003", State: StateQueued}); got.ID != want.ID || got.State != want.State {
		t.Fatalf("Submit()=%+v, want %+v", got, want)
	}
	second, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := second.State, StateRunning; got != want {
		t.Fatalf("second Submit() state=%q, want existing job's %q", got, want)
	}
	if got, want := len(f.created), 1; got != want {
		t.Fatalf("jobs created=%d, want %d", got, want)
	}
	sent := f.created["dp5/step-0003"]
	if got, want := sent.Trajectories[0].Advantage, 0.71; got != want {
		t.Fatalf("sent advantage=%v, want %v", got, want)
	}
	if got, want := sent.OutputAdapter, "dp5-step-0003"; got != want {
		t.Fatalf("sent output adapter=%q, want %q", got, want)
	}
}

func TestJobClient_Submit_EmptyID(t *testing.T) {
	c := NewJobClient("http://127.0.0.1:1", fastOptions())
	if _, err := c.Submit(context.Background(), JobRequest{}); err == nil {
		t.Fatal("Submit() with no id succeeded")
	}
}

func TestJobClient_Get_RawSlashInPath(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateRunning, Progress: 0.25})
	c := NewJobClient(srv.URL, fastOptions())
	job, err := c.get(context.Background(), "dp5/step-0003")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := job, (Job{ID: "dp5/step-0003", State: StateRunning, Progress: 0.25}); got != want {
		t.Fatalf("get()=%+v, want %+v", got, want)
	}
	reqs, _, _ := f.counts()
	if got, want := reqs[0], "GET /v1/jobs/dp5/step-0003"; got != want {
		t.Fatalf("request=%q, want %q", got, want)
	}
}

func TestJobClient_Get_NotFound(t *testing.T) {
	_, srv := newFakeTrainer(t)
	c := NewJobClient(srv.URL, fastOptions())
	_, err := c.get(context.Background(), "r/step-0001")
	if !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("get()=%v, want ErrJobNotFound", err)
	}
	if !strings.Contains(err.Error(), "no job r/step-0001") {
		t.Fatalf("error %q does not carry the body message", err)
	}
}

func TestJobClient_Submit_RetriesServerErrors(t *testing.T) {
	for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f, srv := newFakeTrainer(t, Job{State: StateQueued})
			f.failFirst, f.failStatus = 2, status
			c := NewJobClient(srv.URL, fastOptions())
			job, err := c.Submit(context.Background(), testRequest("r/step-0001"))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := job.State, StateQueued; got != want {
				t.Fatalf("state=%q, want %q", got, want)
			}
			reqs, _, _ := f.counts()
			if got, want := len(reqs), 3; got != want {
				t.Fatalf("requests=%d (%v), want %d", got, reqs, want)
			}
		})
	}
}

func TestJobClient_Submit_GivesUpOnPersistent5xx(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateQueued})
	f.failFirst = 100
	c := NewJobClient(srv.URL, fastOptions())
	_, err := c.Submit(context.Background(), testRequest("r/step-0001"))
	if err == nil {
		t.Fatal("Submit() succeeded against a failing trainer")
	}
	var se *StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("Submit()=%v, want a 503 StatusError", err)
	}
	reqs, _, _ := f.counts()
	if got, want := len(reqs), 4; got != want { // one try and 3 retries
		t.Fatalf("requests=%d, want %d", got, want)
	}
}

func TestJobClient_ClientErrorNotRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]string{"message": "lora rank 0 out of range [1, 64]"}})
	}))
	defer srv.Close()
	c := NewJobClient(srv.URL, fastOptions())
	_, err := c.Submit(context.Background(), testRequest("r/step-0001"))
	if err == nil {
		t.Fatal("Submit() succeeded on a 400")
	}
	for _, want := range []string{"400", "lora rank 0 out of range", srv.URL + "/v1/jobs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if got, want := n.Load(), int32(1); got != want {
		t.Fatalf("requests=%d, want %d", got, want)
	}
}

func TestJobClient_Garbage(t *testing.T) {
	for _, tt := range []struct {
		name, contentType, body, want string
	}{
		{"html", "text/html", "<html><body>Welcome to nginx!</body></html>", `"<html><body>Welcome to nginx!`},
		{"array", "application/json", `[1,2,3]`, `"[1,2,3]"`},
		{"wrong shape", "application/json", `{"name":"x","status":"ok"}`, "no job id or state"},
		{"unknown state", "application/json", `{"id":"r/step-0001","state":"exploded"}`, `unknown state "exploded"`},
		{"other job", "application/json", `{"id":"r/step-0002","state":"running"}`, `"r/step-0002"`},
		{"empty", "", "", "not a trainer job"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.contentType)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			c := NewJobClient(srv.URL, fastOptions())
			_, err := c.get(context.Background(), "r/step-0001")
			if err == nil {
				t.Fatal("get() accepted garbage")
			}
			for _, want := range []string{srv.URL + "/v1/jobs/r/step-0001", tt.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestJobClient_Garbage_LongBodyQuotedShort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<!DOCTYPE html>" + strings.Repeat("x", 10000)))
	}))
	defer srv.Close()
	_, err := NewJobClient(srv.URL, fastOptions()).get(context.Background(), "r/step-0001")
	if err == nil {
		t.Fatal("get() accepted HTML")
	}
	if len(err.Error()) > 400 {
		t.Fatalf("error is %d bytes long, want a short prefix: %q", len(err.Error()), err)
	}
	if !strings.Contains(err.Error(), `"<!DOCTYPE html>xxx`) {
		t.Fatalf("error %q does not quote the body's start", err)
	}
}

// countingTransport counts round trips to a peer that is not there.
type countingTransport struct{ n atomic.Int32 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

func TestJobClient_ConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	tr := &countingTransport{}
	opts := fastOptions()
	opts.HTTPClient = &http.Client{Transport: tr}
	opts.Retry = &httpx.Policy{Retries: 2, BaseDelay: time.Millisecond}
	c := NewJobClient("http://"+addr, opts)
	_, err = c.Submit(context.Background(), testRequest("r/step-0001"))
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Submit()=%v, want connection refused", err)
	}
	if !strings.Contains(err.Error(), "gave up after 3 attempts") {
		t.Fatalf("error %q does not say how often it tried", err)
	}
	if got, want := tr.n.Load(), int32(3); got != want {
		t.Fatalf("attempts=%d, want %d", got, want)
	}
}

func TestJobClient_Cancel(t *testing.T) {
	f, srv := newFakeTrainer(t, Job{State: StateRunning})
	c := NewJobClient(srv.URL, fastOptions())
	if err := c.Cancel(context.Background(), "r/step-0001"); err != nil {
		t.Fatal(err)
	}
	reqs, _, deletes := f.counts()
	if got, want := deletes, 1; got != want {
		t.Fatalf("deletes=%d, want %d", got, want)
	}
	if got, want := reqs[0], "DELETE /v1/jobs/r/step-0001"; got != want {
		t.Fatalf("request=%q, want %q", got, want)
	}
}

func TestNewJobClient_Defaults(t *testing.T) {
	c := NewJobClient("http://127.0.0.1:7000/", JobClientOptions{})
	if c.baseURL != "http://127.0.0.1:7000" || c.pollInterval != 200*time.Millisecond ||
		c.maxPollInterval != 5*time.Second || c.http.Policy() != httpx.DefaultPolicy() || c.http.Timeout() != DefaultRequestTimeout {
		t.Fatalf("defaults: %+v, policy %+v", c, c.http.Policy())
	}
	if c := NewJobClient("x", JobClientOptions{Retry: &httpx.Policy{Retries: -1}}); c.http.Policy().Retries != 0 {
		t.Fatalf("Retries -1 gave %d retries, want 0", c.http.Policy().Retries)
	}
}

// TestJobClient_Submit_TooLarge: a trainer that closes the connection on a
// large job (as one capping a job's size does mid-upload) leaves the
// client a reset or broken pipe; the error says how large the job was.
func TestJobClient_Submit_TooLarge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 1<<20 {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	c := NewJobClient(srv.URL, fastOptions())
	big := JobRequest{ID: "r/step-0001", Trajectories: []Trajectory{{MessagesAndChoices: []json.RawMessage{json.RawMessage(`"` + strings.Repeat("x", 3_000_000) + `"`)}}}}
	_, err := c.Submit(context.Background(), big)
	if err == nil || !strings.Contains(err.Error(), "submit trainer job r/step-0001 (a 3 MB request: a trainer may cap a job's size") {
		t.Fatalf("Submit of a 3 MB job the trainer drops: %v", err)
	}
	_, err = c.Submit(context.Background(), JobRequest{ID: "r/step-0002"})
	if err == nil || strings.Contains(err.Error(), "MB request") {
		t.Fatalf("Submit of a small job the trainer fails: %v, want an error without a size note", err)
	}
}
