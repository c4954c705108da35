package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// completion is the fake server's answer: one valid `think` tool call
// with vLLM-style logprobs and token ids, the size of a real answer.
const completion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-1","type":"function","function":{"name":"think","arguments":"{}"}}]},"logprobs":{"content":[{"token":"token_id:151657","logprob":-0.1,"bytes":[60],"top_logprobs":[]},{"token":"token_id:5","logprob":-0.2,"bytes":[116],"top_logprobs":[]},{"token":"token_id:151658","logprob":-0.01,"bytes":[62],"top_logprobs":[]}]},"finish_reason":"tool_calls","stop_reason":null,"token_ids":[151657,5,151658]}],"usage":{"prompt_tokens":700,"completion_tokens":3,"total_tokens":703},"prompt_token_ids":[1,2,3,4,5,6,7,8]}`

// answers are the completion with each of five tools, so that episodes
// differ and GRPO groups carry signal.
var answers = func() [][]byte {
	var out [][]byte
	for _, tool := range []string{`think"`, `eat"`, `pick_up_left"`, `pick_up_right"`, `put_down_left"`} {
		out = append(out, []byte(strings.Replace(completion, `think"`, tool, 1)))
	}
	return out
}()

// The fake's /v1/models and /metrics answers.
const (
	modelsJSON  = `{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench"}]}`
	metricsText = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0\n"
)

// LLMHandler is a fake OpenAI-compatible server that answers every chat
// completion with a tool call after a fixed service time, spending little
// CPU: it hashes the request without parsing it, and the hash picks the
// tool. A request is its episode's seeds and conversation, so a training
// run's answers — and whether its groups carry signal — do not depend on
// the order in which concurrent requests arrive (in turn, the five
// calls of one round often got the five tools, every episode alike, and
// about one quick `step` row in twenty trained a step on nothing). It
// also answers the adapter admin calls, /health and /metrics, so a run
// can load adapters into it.
func LLMHandler(service time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		sum := fnv.New64a()
		io.Copy(sum, r.Body)
		body := answers[sum.Sum64()%uint64(len(answers))]
		t := time.NewTimer(service)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		w.Write(body)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, modelsJSON)
	})
	ok := func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body); fmt.Fprint(w, "ok") }
	mux.HandleFunc("POST /v1/load_lora_adapter", ok)
	mux.HandleFunc("POST /v1/unload_lora_adapter", ok)
	mux.HandleFunc("GET /health", ok)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, metricsText)
	})
	return mux
}

// cpuPath answers the serving process's CPU time (ServeLLM).
const cpuPath = "/bench/cpu"

// ServeLLM serves LLMHandler's fake inference server with net/http on a
// loopback port until ctx ends, as `grpo bench serve-fake` does in a
// child process, so that the bench's CPU figures are the client's alone.
// One route of its own, GET /bench/cpu, answers the process's CPU time
// so far in nanoseconds (user + system), so that the bench can say what
// the server cost per call (serverCPU). ready receives the address once
// it accepts connections.
func ServeLLM(ctx context.Context, service time.Duration, ready func(addr string)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on loopback: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", LLMHandler(service))
	mux.HandleFunc("GET "+cpuPath, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, strconv.FormatInt(cpuTime().Nanoseconds(), 10))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	ready(ln.Addr().String())
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return fmt.Errorf("serve the fake: %w", err)
	}
	return nil
}

// TrainerHandler is a fake trainer job API (DESIGN §5) whose every job
// succeeds a fixed duration after it was created, reporting its progress
// meanwhile. Creating an id again
// returns the existing job.
func TrainerHandler(duration time.Duration) http.Handler {
	var (
		mu   sync.Mutex
		jobs = map[string]time.Time{}
		outs = map[string]string{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID            string `json:"id"`
			OutputAdapter string `json:"output_adapter"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ID == "" {
			http.Error(w, `{"error":{"message":"bad job"}}`, http.StatusBadRequest)
			return
		}
		mu.Lock()
		if _, ok := jobs[req.ID]; !ok {
			jobs[req.ID], outs[req.ID] = time.Now(), req.OutputAdapter
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(map[string]string{"id": req.ID, "state": "queued"})
	})
	mux.HandleFunc("GET /v1/jobs/", func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/jobs/")
		if u, err := url.PathUnescape(id); err == nil {
			id = u
		}
		mu.Lock()
		start, ok := jobs[id]
		out := outs[id]
		mu.Unlock()
		if !ok {
			http.Error(w, `{"error":{"message":"no such job"}}`, http.StatusNotFound)
			return
		}
		// Progress moves with time, as a real trainer's does, so clients
		// keep polling at their shortest interval.
		elapsed := time.Since(start)
		job := map[string]any{"id": id, "state": "running", "progress": float64(elapsed) / float64(duration)}
		if elapsed >= duration {
			job = map[string]any{"id": id, "state": "succeeded", "progress": 1.0,
				"metrics": map[string]float64{"loss": 0, "kl": 0, "grad_norm": 0},
				"adapter": map[string]string{"name": out, "path": "/fake/" + out}}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(job)
	})
	mux.HandleFunc("DELETE /v1/jobs/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{}`)
	})
	return mux
}
