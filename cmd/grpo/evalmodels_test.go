package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// strictVendor is an OpenAI-compatible server that, like some API
// vendors, answers 400 to a request with a field it does not know (here:
// vLLM's return_token_ids and chat_template_kwargs, logprobs, and
// max_tokens, which it wants as max_completion_tokens); it records the
// keys of every request and forwards accepted ones to a scripted policy.
type strictVendor struct {
	refuse []string
	mu     sync.Mutex
	keys   []map[string]json.RawMessage
}

func (v *strictVendor) handler(to string) http.Handler {
	u, _ := url.Parse(to)
	proxy := httputil.NewSingleHostReverseProxy(u)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			body, _ := io.ReadAll(r.Body)
			var m map[string]json.RawMessage
			json.Unmarshal(body, &m)
			v.mu.Lock()
			v.keys = append(v.keys, m)
			v.mu.Unlock()
			for _, k := range v.refuse {
				if _, ok := m[k]; ok {
					w.WriteHeader(http.StatusBadRequest)
					fmt.Fprintf(w, `{"error":{"message":"Unrecognized request argument supplied: %s","type":"invalid_request_error"}}`, k)
					return
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	})
}

// TestEvalModelsFileRequestOptions: a models file entry's request options
// reach the wire: a strict vendor gets no return_token_ids, logprobs or
// chat_template_kwargs and the token limit as max_completion_tokens; a
// vLLM entry gets its own chat_template_kwargs in place of the flag's.
// Without the options the strict vendor refuses the evaluation.
func TestEvalModelsFileRequestOptions(t *testing.T) {
	policy := rollouttest.New(rollouttest.WorkedExample)
	defer policy.Close()
	vendor := &strictVendor{refuse: []string{"return_token_ids", "logprobs", "top_logprobs", "chat_template_kwargs", "max_tokens"}}
	vs := httptest.NewServer(vendor.handler(policy.URL))
	defer vs.Close()
	vllm := &strictVendor{}
	ls := httptest.NewServer(vllm.handler(policy.URL))
	defer ls.Close()

	dir := t.TempDir()
	path := filepath.Join(dir, "models.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`- name: qwen3-14b
  url: %s/v1
  chat_template_kwargs: {enable_thinking: false}
- name: vendor-model
  url: %s/v1
  api_key_env: VENDOR_KEY
  chat_template_kwargs: {}
  omit_token_ids: true
  omit_logprobs: true
  max_completion_tokens: true
`, ls.URL, vs.URL)), 0o644)
	code, out, errs := cli(t, "eval", "--models", path, "--episodes", "2", "--max-tokens", "77", "--chat-template-kwargs", `{"flag": 1}`, "--json")
	if code != 0 {
		t.Fatalf("eval --models: exit %d\n%s", code, errs)
	}
	var got evalJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Results) != 2 || got.Results[1].Model != "vendor-model" || got.Results[1].Errored != 0 {
		t.Fatalf("results: %v\n%s", err, out)
	}
	if len(vendor.keys) == 0 || len(vllm.keys) == 0 {
		t.Fatalf("requests: vendor %d, vllm %d", len(vendor.keys), len(vllm.keys))
	}
	for _, m := range vendor.keys {
		if string(m["max_completion_tokens"]) != "77" || string(m["model"]) != `"vendor-model"` {
			t.Fatalf("vendor request keys %v: want max_completion_tokens 77", keysOf(m))
		}
	}
	for _, m := range vllm.keys {
		if string(m["chat_template_kwargs"]) != `{"enable_thinking":false}` || string(m["max_tokens"]) != "77" ||
			string(m["return_token_ids"]) != "true" || string(m["logprobs"]) != "true" {
			t.Fatalf("vLLM request: %v, chat_template_kwargs %s; want the file's kwargs, max_tokens, token ids and logprobs", keysOf(m), m["chat_template_kwargs"])
		}
	}

	// The same vendor without the options: refused, naming the field.
	os.WriteFile(path, []byte(fmt.Sprintf("- {name: vendor-model, url: %s/v1}\n", vs.URL)), 0o644)
	code, _, errs = cli(t, "eval", "--models", path, "--episodes", "1", "--retries", "0", "--episode-replays", "0")
	if code == 0 || !strings.Contains(errs, "Unrecognized request argument supplied") {
		t.Fatalf("eval against the strict vendor without options: exit %d\n%s", code, errs)
	}
	// Unknown keys in the file are named.
	os.WriteFile(path, []byte(fmt.Sprintf("- {name: m, url: %s/v1, omit_tokens: true}\n", vs.URL)), 0o644)
	if code, _, errs := cli(t, "eval", "--models", path); code == 0 || !strings.Contains(errs, "omit_tokens") || !strings.Contains(errs, "omit_token_ids") {
		t.Fatalf("unknown key: exit %d\n%s", code, errs)
	}
}

func keysOf(m map[string]json.RawMessage) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
