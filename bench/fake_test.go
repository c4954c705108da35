package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

func startServeLLM(t *testing.T, service time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- ServeLLM(ctx, service, func(a string) { addr <- a }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeLLM: %v", err)
		}
	})
	return <-addr
}

// TestServeLLMAnswers: ServeLLM answers every path LLMHandler answers,
// the same way, keeps connections alive and waits the service time
// before a completion.
func TestServeLLMAnswers(t *testing.T) {
	addr := startServeLLM(t, 50*time.Millisecond)
	base := "http://" + addr
	local := httptestServer(t, LLMHandler(50*time.Millisecond))
	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	hc := &http.Client{Transport: &http.Transport{}}
	get := func(url, method, body string) (int, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, url, strings.NewReader(body))
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), time.Since(start)
	}
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/models", ""},
		{"GET", "/health?probe=1", ""},
		{"GET", "/metrics", ""},
		{"POST", "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"/x"}`},
		{"POST", "/v1/unload_lora_adapter", `{"lora_name":"a"}`},
		{"GET", "/nope", ""},
	} {
		code, body, _ := get(base+r.path, r.method, r.body)
		wantCode, wantBody, _ := get(local+r.path, r.method, r.body)
		if code != wantCode || body != wantBody {
			t.Errorf("%s %s: %d %q, LLMHandler answers %d %q", r.method, r.path, code, body, wantCode, wantBody)
		}
	}
	for seed := range 3 {
		req := fmt.Sprintf(`{"model":"m","seed":%d,"messages":[]}`, seed)
		code, body, took := get(base+"/v1/chat/completions", "POST", req)
		wantCode, wantBody, _ := get(local+"/v1/chat/completions", "POST", req)
		if _, ok := toolOf([]byte(body)); code != 200 || !ok || code != wantCode || body != wantBody {
			t.Fatalf("completion: %d %q, LLMHandler answers %d %q", code, body, wantCode, wantBody)
		}
		if took < 50*time.Millisecond {
			t.Errorf("completion answered after %v, before the service time", took)
		}
	}
	// The first request to each server dialed; every other reused.
	dials := 0
	for _, r := range reused {
		if !r {
			dials++
		}
	}
	if dials != 2 {
		t.Errorf("%d connections for %d requests to two servers, want 2", dials, len(reused))
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	url, stop, err := startLocal(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}

// TestServeLLMReportsCPU: ServeLLM answers its process's CPU time
// on GET /bench/cpu (with or without /v1 in the base URL), which grows
// with its work; a server without the route is not asked twice: its CPU
// is unknown.
func TestServeLLMReportsCPU(t *testing.T) {
	base := "http://" + startServeLLM(t, time.Millisecond)
	first, ok := serverCPU(base + "/v1")
	if !ok || first <= 0 {
		t.Fatalf("serverCPU = %v, %v; want the process's CPU time", first, ok)
	}
	// This process is the server's: 20 ms of its CPU, counted as CPU (a
	// loaded machine may give a spin of 20 ms of wall time far less).
	spin := cpuTime()
	for cpuTime()-spin < 20*time.Millisecond {
	}
	if later, ok := serverCPU(base); !ok || later < first+10*time.Millisecond {
		t.Fatalf("serverCPU after 20 ms of work = %v, %v; want at least %v", later, ok, first+10*time.Millisecond)
	}
	if d, ok := serverCPU(httptestServer(t, LLMHandler(time.Millisecond)) + "/v1"); ok {
		t.Fatalf("serverCPU of a server without the route = %v, want unknown", d)
	}
}

// TestLLMHandlerAnswersByRequest: the in-process fake's tool is a function
// of the request, not of the order requests arrive in, so a training
// run's rewards are the same however its concurrent calls interleave;
// different requests still get different tools.
func TestLLMHandlerAnswersByRequest(t *testing.T) {
	base := httptestServer(t, LLMHandler(0))
	tool := func(body string) string {
		t.Helper()
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		name, ok := toolOf(b)
		if err != nil || !ok {
			t.Fatalf("completion: %v %q", err, b)
		}
		return name
	}
	seen := map[string]bool{}
	for seed := range 20 {
		body := fmt.Sprintf(`{"model":"m","seed":%d,"messages":[]}`, seed)
		first := tool(body)
		for range 3 {
			if again := tool(body); again != first {
				t.Fatalf("request %s answered %s, then %s", body, first, again)
			}
		}
		seen[first] = true
	}
	if len(seen) < 3 {
		t.Fatalf("20 different requests got %d tools (%v), want most of the %d", len(seen), seen, len(answers))
	}
}

// toolOf is the name of the one tool call of a completion's one choice.
func toolOf(body []byte) (string, bool) {
	var c struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					Function struct{ Name string } `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &c) != nil || len(c.Choices) != 1 || len(c.Choices[0].Message.ToolCalls) != 1 {
		return "", false
	}
	return c.Choices[0].Message.ToolCalls[0].Function.Name, true
}
