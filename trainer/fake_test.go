package trainer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// fakeTrainer is an httptest peer serving the job API. Each GET of a job
// answers the next entry of states (the last one repeats); the first
// failFirst requests of any kind answer failStatus.
type fakeTrainer struct {
	mu         sync.Mutex
	states     []Job
	failFirst  int
	failStatus int

	created  map[string]JobRequest
	requests []string // "METHOD /path"
	gets     int
	deletes  int
}

func newFakeTrainer(tb testing.TB, states ...Job) (*fakeTrainer, *httptest.Server) {
	tb.Helper()
	f := &fakeTrainer{states: states, created: map[string]JobRequest{}, failStatus: http.StatusServiceUnavailable}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/jobs", f.create)
	mux.HandleFunc("GET /v1/jobs/{id...}", f.get)
	mux.HandleFunc("DELETE /v1/jobs/{id...}", f.delete)
	srv := httptest.NewServer(f.record(mux))
	tb.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeTrainer) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.Path)
		fail := f.failFirst > 0
		if fail {
			f.failFirst--
		}
		f.mu.Unlock()
		if fail {
			http.Error(w, "trainer restarting", f.failStatus)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (f *fakeTrainer) create(w http.ResponseWriter, r *http.Request) {
	var req JobRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.created[req.ID]; ok {
		writeJSON(w, http.StatusOK, f.current(req.ID))
		return
	}
	f.created[req.ID] = req
	writeJSON(w, http.StatusAccepted, Job{ID: req.ID, State: StateQueued})
}

func (f *fakeTrainer) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.states) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no job " + id})
		return
	}
	job := f.current(id)
	f.gets++
	writeJSON(w, http.StatusOK, job)
}

func (f *fakeTrainer) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.deletes++
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, Job{ID: r.PathValue("id"), State: StateCancelled})
}

// current is the job as the next GET sees it; f.mu is held.
func (f *fakeTrainer) current(id string) Job {
	if len(f.states) == 0 {
		return Job{ID: id, State: StateQueued}
	}
	job := f.states[min(f.gets, len(f.states)-1)]
	job.ID = id
	return job
}

func (f *fakeTrainer) counts() (requests []string, gets, deletes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...), f.gets, f.deletes
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// fastOptions poll and retry within milliseconds.
func fastOptions() JobClientOptions {
	return JobClientOptions{
		PollInterval:    time.Millisecond,
		MaxPollInterval: 4 * time.Millisecond,
		RequestTimeout:  5 * time.Second,
		Retry:           &httpx.Policy{Retries: 3, BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond},
	}
}

func testRequest(id string) JobRequest {
	return JobRequest{
		ID:            id,
		BaseModel:     "Qwen/Qwen3-14B",
		OutputAdapter: "dp5-step-0003",
		LoRA:          LoRA{Rank: 8, Alpha: 16, TargetModules: []string{"q_proj"}},
		Hyperparameters: Hyperparameters{
			LearningRate: 5e-6, Epsilon: 0.2, EpsilonHigh: 0.2, Epochs: 1,
		},
		Trajectories: []Trajectory{{
			MessagesAndChoices: []json.RawMessage{json.RawMessage(`{"role":"user","content":"hi"}`)},
			Reward:             0.4, Advantage: 0.71, Group: "g1", Episode: "e4", Agent: 3,
		}},
	}
}
