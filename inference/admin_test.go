package inference

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestNewAdminClient_Root(t *testing.T) {
	for _, tt := range []struct{ base, url, root string }{
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"},
		{"http://127.0.0.1:8000", "http://127.0.0.1:8000", "http://127.0.0.1:8000"},
		{"http://h/proxy/v1", "http://h/proxy/v1", "http://h/proxy"},
	} {
		c := NewAdminClient(tt.base, AdminOptions{})
		if got, want := c.URL(), tt.url; got != want {
			t.Errorf("NewAdminClient(%q).URL()=%q, want %q", tt.base, got, want)
		}
		if got, want := c.root, tt.root; got != want {
			t.Errorf("NewAdminClient(%q) root=%q, want %q", tt.base, got, want)
		}
	}
}

func TestAdminClient_LoadUnload(t *testing.T) {
	f, srv := newFakeVLLM(t)
	c := NewAdminClient(srv.URL+"/v1", AdminOptions{})
	ctx := context.Background()

	if err := c.LoadAdapter(ctx, "r-step-0001", "/adapters/r-step-0001", false); err != nil {
		t.Fatal(err)
	}
	models, err := c.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(models), 2; got != want {
		t.Fatalf("models=%d, want %d (base and adapter)", got, want)
	}
	if err := c.UnloadAdapter(ctx, "r-step-0001"); err != nil {
		t.Fatal(err)
	}
	if f.has("r-step-0001") {
		t.Fatal("adapter still loaded after UnloadAdapter")
	}
}

func TestAdminClient_LoadAdapter_Exists(t *testing.T) {
	f, srv := newFakeVLLM(t)
	c := NewAdminClient(srv.URL+"/v1", AdminOptions{})
	ctx := context.Background()
	if err := c.LoadAdapter(ctx, "a", "/p1", false); err != nil {
		t.Fatal(err)
	}
	err := c.LoadAdapter(ctx, "a", "/p2", false)
	if !errors.Is(err, ErrAdapterExists) {
		t.Fatalf("second LoadAdapter()=%v, want ErrAdapterExists", err)
	}
	var ae *AdminError
	if !errors.As(err, &ae) {
		t.Fatalf("LoadAdapter()=%T, want *AdminError", err)
	}
	if got, want := ae.StatusCode, http.StatusBadRequest; got != want {
		t.Fatalf("status=%d, want %d", got, want)
	}
	if !strings.Contains(ae.Message, "The lora adapter 'a' has already been loaded") {
		t.Fatalf("message=%q, want vLLM's", ae.Message)
	}
	if !strings.Contains(err.Error(), srv.URL+"/v1/load_lora_adapter") {
		t.Fatalf("error %q does not name the URL", err)
	}

	// In place replaces it.
	if err := c.LoadAdapter(ctx, "a", "/p2", true); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got, want := f.adapters["a"], "/p2"; got != want {
		t.Fatalf("path=%q, want %q", got, want)
	}
}

func TestAdminClient_LoadAdapter_OtherErrorIsNotExists(t *testing.T) {
	_, srv := newFakeVLLM(t)
	err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).LoadAdapter(context.Background(), "a", "", false)
	if err == nil {
		t.Fatal("LoadAdapter() with no path succeeded")
	}
	if errors.Is(err, ErrAdapterExists) {
		t.Fatalf("LoadAdapter()=%v matches ErrAdapterExists", err)
	}
	if !strings.Contains(err.Error(), "Both 'lora_name' and 'lora_path' must be provided.") {
		t.Fatalf("error %q does not carry vLLM's message", err)
	}
}

func TestAdminClient_UnloadAdapter_NotFound(t *testing.T) {
	_, srv := newFakeVLLM(t)
	err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).UnloadAdapter(context.Background(), "ghost")
	if !errors.Is(err, ErrAdapterNotFound) {
		t.Fatalf("UnloadAdapter()=%v, want ErrAdapterNotFound", err)
	}
	if !strings.Contains(err.Error(), "unload adapter ghost") || !strings.Contains(err.Error(), "404") {
		t.Fatalf("error %q does not say what failed", err)
	}
}

func TestAdminClient_UnloadAdapter_OldVLLM400(t *testing.T) {
	// vLLM before the NotFoundError change answered 400 with a flat body.
	srv := staticServer(t, http.StatusBadRequest, "application/json",
		`{"object":"error","message":"The lora adapter 'ghost' cannot be found.","type":"InvalidUserInput","param":null,"code":400}`)
	err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).UnloadAdapter(context.Background(), "ghost")
	if !errors.Is(err, ErrAdapterNotFound) {
		t.Fatalf("UnloadAdapter()=%v, want ErrAdapterNotFound", err)
	}
}

func TestAdminClient_NoRuntimeLoRAAPI(t *testing.T) {
	// Without VLLM_ALLOW_RUNTIME_LORA_UPDATING the routes do not exist: a
	// 404 that must not read as "adapter not found".
	srv := staticServer(t, http.StatusNotFound, "application/json", `{"detail":"Not Found"}`)
	c := NewAdminClient(srv.URL+"/v1", AdminOptions{})
	err := c.UnloadAdapter(context.Background(), "a")
	if err == nil || errors.Is(err, ErrAdapterNotFound) {
		t.Fatalf("UnloadAdapter()=%v, want a missing-route error", err)
	}
	err = c.LoadAdapter(context.Background(), "a", "/p", false)
	if err == nil || !strings.Contains(err.Error(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True") {
		t.Fatalf("LoadAdapter()=%v, want a hint about the runtime LoRA API", err)
	}
}

func TestAdminClient_APIKey(t *testing.T) {
	f, srv := newFakeVLLM(t)
	f.apiKey = "sk-secret-123"
	ctx := context.Background()

	c := NewAdminClient(srv.URL+"/v1", AdminOptions{APIKey: "sk-secret-123"})
	if err := c.LoadAdapter(ctx, "a", "/p", false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Models(ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range f.authSeen {
		if h != "Bearer sk-secret-123" {
			t.Fatalf("Authorization=%q, want the bearer key", h)
		}
	}

	wrong := NewAdminClient(srv.URL+"/v1", AdminOptions{APIKey: "sk-wrong-456"})
	err := wrong.Probe(ctx)
	if err == nil {
		t.Fatal("Probe() with a wrong key succeeded")
	}
	if !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "API key") {
		t.Fatalf("error %q does not point at the key", err)
	}
	if strings.Contains(err.Error(), "sk-wrong-456") {
		t.Fatalf("error %q leaks the key", err)
	}
}

func TestAdminClient_Health(t *testing.T) {
	f, srv := newFakeVLLM(t)
	c := NewAdminClient(srv.URL+"/v1", AdminOptions{})
	if err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.health = http.StatusServiceUnavailable
	f.mu.Unlock()
	err := c.Health(context.Background())
	if err == nil {
		t.Fatal("Health() of a 503 endpoint succeeded")
	}
	if !strings.Contains(err.Error(), srv.URL+"/health") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("error %q does not name the URL and status", err)
	}
}
