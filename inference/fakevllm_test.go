package inference

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
)

// fakeVLLM is an httptest peer answering vLLM's admin API the way vLLM
// does: plain-text 200s, {"error":{...}} bodies for 400/404, and a FastAPI
// {"detail":"Not Found"} for unknown routes.
type fakeVLLM struct {
	mu       sync.Mutex
	adapters map[string]string // name -> path
	inplace  []bool            // load_inplace of each load request
	apiKey   string            // if set, /v1 routes need it
	health   int               // status of /health; 0 = 200
	metrics  string
	authSeen []string

	// old makes it behave as vLLM before load_inplace: the field is
	// ignored, so a second load of a name answers 400.
	old bool
	// silent answers 200 to a load of a name it has, keeping the old
	// weights (and root).
	silent bool
	// notFound answers that many loads with vLLM's 404 NotFoundError, as
	// while an adapter's files have not appeared on a shared filesystem.
	notFound int
	// chat is the status of chat completions (0: 200 with okCompletion);
	// chatBlock, if set, holds each completion until it is closed.
	chat      int
	chatBlock chan struct{}
	// base and baseRoot are the base model it lists and its root
	// (default Qwen/Qwen3-14B for both).
	base, baseRoot string
	// events records loads, unloads and completions in order:
	// "load NAME PATH", "unload NAME", "chat MODEL".
	events []string
}

func newFakeVLLM(tb testing.TB) (*fakeVLLM, *httptest.Server) {
	tb.Helper()
	f, h := newFakeVLLMHandler()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return f, srv
}

// newFakeVLLMHandler is a fakeVLLM and its handler, to serve where the
// test chooses (a pipeNet in a synctest bubble).
func newFakeVLLMHandler() (*fakeVLLM, http.Handler) {
	f := &fakeVLLM{adapters: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/load_lora_adapter", f.auth(f.load))
	mux.HandleFunc("POST /v1/unload_lora_adapter", f.auth(f.unload))
	mux.HandleFunc("GET /v1/models", f.auth(f.models))
	mux.HandleFunc("POST /v1/chat/completions", f.auth(f.complete))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		code := f.health
		f.mu.Unlock()
		if code != 0 {
			w.WriteHeader(code)
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(f.metrics))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeBody(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return f, mux
}

func (f *fakeVLLM) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.authSeen = append(f.authSeen, r.Header.Get("Authorization"))
		key := f.apiKey
		f.mu.Unlock()
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			writeBody(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		next(w, r)
	}
}

func (f *fakeVLLM) load(w http.ResponseWriter, r *http.Request) {
	var req LoadAdapterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		vllmError(w, http.StatusBadRequest, "BadRequestError", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inplace = append(f.inplace, req.LoadInplace)
	if f.old {
		req.LoadInplace = false
	}
	if f.notFound > 0 {
		f.notFound--
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("No adapter found for %s", req.LoraPath))
		return
	}
	if req.LoraName == "" || req.LoraPath == "" {
		vllmError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	if _, ok := f.adapters[req.LoraName]; ok && f.silent {
		_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoraName)
		return
	}
	if _, ok := f.adapters[req.LoraName]; ok && !req.LoadInplace {
		vllmError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf(
			"The lora adapter '%s' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.", req.LoraName))
		return
	}
	f.adapters[req.LoraName] = req.LoraPath
	f.events = append(f.events, "load "+req.LoraName+" "+req.LoraPath)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.LoraName)
}

func (f *fakeVLLM) unload(w http.ResponseWriter, r *http.Request) {
	var req UnloadAdapterRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.adapters[req.LoraName]; !ok {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.LoraName))
		return
	}
	delete(f.adapters, req.LoraName)
	f.events = append(f.events, "unload "+req.LoraName)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.LoraName)
}

func (f *fakeVLLM) models(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	base, root := cmp.Or(f.base, "Qwen/Qwen3-14B"), cmp.Or(f.baseRoot, "Qwen/Qwen3-14B")
	list := ModelList{Object: "list", Data: []Model{{ID: base, Object: "model", OwnedBy: "vllm", Root: root}}}
	for name, path := range f.adapters {
		parent := base
		list.Data = append(list.Data, Model{ID: name, Object: "model", OwnedBy: "vllm", Root: path, Parent: &parent})
	}
	writeBody(w, http.StatusOK, list)
}

func (f *fakeVLLM) complete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	f.events = append(f.events, "chat "+req.Model)
	code, block := f.chat, f.chatBlock
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-r.Context().Done():
			return
		}
	}
	if code != 0 {
		vllmError(w, code, "InternalServerError", "engine dead")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(okCompletion))
}

// set changes the fake's behaviour under its lock.
func (f *fakeVLLM) set(fn func(f *fakeVLLM)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// log returns the events so far.
func (f *fakeVLLM) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.events...)
}

// waitLogged waits until f has logged n events (requests in flight
// count once they arrive). A request started in a goroutine can take
// seconds to arrive on a loaded CI machine: the wait fails after
// testutil.Patience, not sooner, and never lets the test go on before.
func (f *fakeVLLM) waitLogged(t *testing.T, n int) {
	t.Helper()
	var log []string
	if !testutil.Eventually(func() bool { log = f.log(); return len(log) >= n }) {
		t.Fatalf("%d events logged after %s, want %d: %v", len(log), testutil.Patience, n, log)
	}
}

func (f *fakeVLLM) root(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.adapters[name]
}

func (f *fakeVLLM) has(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.adapters[name]
	return ok
}

func vllmError(w http.ResponseWriter, code int, typ, msg string) {
	writeBody(w, code, ErrorBody{Error: ErrorDetail{Message: msg, Type: typ, Code: code}})
}

func writeBody(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// staticServer answers every request with the same status, type and body.
func staticServer(tb testing.TB, code int, contentType, body string) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	tb.Cleanup(srv.Close)
	return srv
}
