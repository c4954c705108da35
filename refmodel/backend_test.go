package refmodel

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestNewNeedsDataDir(t *testing.T) {
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "DataDir") {
		t.Fatalf("New without DataDir: %v", err)
	}
}

func TestOpenCloseLifecycle(t *testing.T) {
	b, err := New(Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err == nil {
		t.Fatal("second Open: no error")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := b.Open(); err != ErrClosed {
		t.Fatalf("Open after Close: %v, want ErrClosed", err)
	}
}

func TestServeShutsDownOnCancel(t *testing.T) {
	b := mustOpen(t, t.TempDir(), 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	for _, path := range []string{"/health", "/healthz", "/v1/models"} {
		if code, _ := do(t, http.MethodGet, url+path, nil); code != 200 {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// FuzzChatCompletion: any request body gets a JSON answer with a status of
// 200, 400 or 404, never a panic.
func FuzzChatCompletion(f *testing.F) {
	f.Add([]byte(`{"model":"refmodel","messages":[{"role":"user","content":"state: {\"round\":1}"}],"tools":[{"type":"function","function":{"name":"think"}}],"logprobs":true,"top_logprobs":3}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tool_choice":{"type":"function","function":{"name":"eat"}}}`))
	f.Add([]byte(`{"model":"x"}`))
	b, err := New(Options{DataDir: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	h := b.InferenceHandler()
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
		switch w.Code {
		case 200, 400, 404:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
		if !json.Valid(w.Body.Bytes()) {
			t.Fatalf("invalid JSON answer %q", w.Body)
		}
	})
}
