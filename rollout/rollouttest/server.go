// Package rollouttest serves scripted OpenAI-compatible chat completions
// for tests: a policy reads the observation's state line and names the
// tool to call, so an environment's outcome is exactly predictable.
package rollouttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/grpo-dev/grpo/rollout"
)

// Policy maps the state a philosopher sees to its reply: a tool name, or
// any other string, which is sent as plain-text content with no tool call.
type Policy func(s rollout.State) string

// Server is a scripted OpenAI-compatible server.
type Server struct {
	*httptest.Server
	Policy Policy
	// Fail, when set, is asked before each request; a non-zero status is
	// answered with that status and an error body.
	Fail  func(call int64) int
	Calls atomic.Int64
}

// New starts a scripted server on loopback. Its URL plus "/v1" is the base
// URL for clients.
func New(p Policy) *Server {
	s := &Server{Policy: p}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"scripted","object":"model","owned_by":"test"}]}`)
	})
	s.Server = httptest.NewServer(mux)
	return s
}

// BaseURL is the server's URL with the /v1 prefix.
func (s *Server) BaseURL() string { return s.URL + "/v1" }

type request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	call := s.Calls.Add(1)
	if s.Fail != nil {
		if code := s.Fail(call); code != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			fmt.Fprintf(w, `{"error":{"message":"scripted failure","type":"InternalServerError","param":null,"code":%d}}`, code)
			return
		}
	}
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var state rollout.State
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			st, err := rollout.ParseState(req.Messages[i].Content)
			if err != nil {
				http.Error(w, "no state line: "+err.Error(), http.StatusBadRequest)
				return
			}
			state = st
			break
		}
	}
	reply := s.Policy(state)
	msg := map[string]any{"role": "assistant", "content": nil}
	finish := "tool_calls"
	if rollout.ToolIndex(reply) >= 0 {
		msg["tool_calls"] = []map[string]any{{
			"id": fmt.Sprintf("call-%d", call), "type": "function",
			"function": map[string]string{"name": reply, "arguments": "{}"},
		}}
	} else {
		msg["content"] = reply
		finish = "stop"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", call), "object": "chat.completion", "created": 1, "model": req.Model,
		"choices": []map[string]any{{
			"index": 0, "message": msg, "finish_reason": finish,
			"logprobs": map[string]any{"content": []map[string]any{{"token": "token_id:7", "logprob": -0.5, "bytes": []int{}}}},
		}},
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
	})
}

// WorkedExample is DESIGN §3's worked example as a policy: philosophers 0
// and 2 pick up left, pick up right, then eat; everyone else thinks. At
// n=5, 5 rounds it scores 1.3275 under both reward functions.
func WorkedExample(s rollout.State) string {
	if s.ID != 0 && s.ID != 2 {
		return rollout.Think
	}
	switch s.Round {
	case 1:
		return rollout.PickUpLeft
	case 2:
		return rollout.PickUpRight
	}
	return rollout.Eat
}
