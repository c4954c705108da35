package inference

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestFleet_LoadEverywhere(t *testing.T) {
	f1, s1 := newFakeVLLM(t)
	f2, s2 := newFakeVLLM(t)
	ctx := context.Background()
	// f2 already has the adapter, e.g. from a step retried after a crash.
	if err := NewAdminClient(s2.URL+"/v1", AdminOptions{}).LoadAdapter(ctx, "r-step-0001", "/a/1", false); err != nil {
		t.Fatal(err)
	}
	fleet := &Fleet{Endpoints: []*AdminClient{
		NewAdminClient(s1.URL+"/v1", AdminOptions{}),
		NewAdminClient(s2.URL+"/v1", AdminOptions{}),
	}}
	if err := fleet.LoadEverywhere(ctx, "r-step-0001", "/a/1"); err != nil {
		t.Fatal(err)
	}
	if !f1.has("r-step-0001") || !f2.has("r-step-0001") {
		t.Fatal("adapter not loaded on every endpoint")
	}

	if err := fleet.UnloadEverywhere(ctx, "r-step-0001"); err != nil {
		t.Fatal(err)
	}
	if f1.has("r-step-0001") || f2.has("r-step-0001") {
		t.Fatal("adapter still loaded after UnloadEverywhere")
	}
	// Unloading again is done already, not an error.
	if err := fleet.UnloadEverywhere(ctx, "r-step-0001"); err != nil {
		t.Fatal(err)
	}
}

func TestFleet_LoadEverywhere_Inplace(t *testing.T) {
	f, s := newFakeVLLM(t)
	fleet := &Fleet{Endpoints: []*AdminClient{NewAdminClient(s.URL+"/v1", AdminOptions{})}, Inplace: true}
	ctx := context.Background()
	for _, path := range []string{"/a/1", "/a/2"} {
		if err := fleet.LoadEverywhere(ctx, "r-current", path); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got, want := f.adapters["r-current"], "/a/2"; got != want {
		t.Fatalf("path=%q, want %q", got, want)
	}
	if len(f.inplace) != 2 || !f.inplace[0] || !f.inplace[1] {
		t.Fatalf("load_inplace sent=%v, want [true true]", f.inplace)
	}
}

func TestFleet_LoadEverywhere_PartialFailure(t *testing.T) {
	f1, s1 := newFakeVLLM(t)
	bad := staticServer(t, http.StatusInternalServerError, "application/json",
		`{"error":{"message":"CUDA error: out of memory","type":"InternalServerError","param":null,"code":500}}`)
	fleet := &Fleet{Endpoints: []*AdminClient{
		NewAdminClient(s1.URL+"/v1", AdminOptions{}),
		NewAdminClient(bad.URL+"/v1", AdminOptions{}),
	}}
	err := fleet.LoadEverywhere(context.Background(), "r-step-0002", "/a/2")
	if err == nil {
		t.Fatal("LoadEverywhere() succeeded with a failing endpoint")
	}
	for _, want := range []string{"failed on 1 of 2 endpoints", bad.URL + "/v1/load_lora_adapter", "CUDA error: out of memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), s1.URL) {
		t.Errorf("error %q blames the healthy endpoint", err)
	}
	if !f1.has("r-step-0002") {
		t.Fatal("healthy endpoint did not load the adapter")
	}
	var ae *AdminError
	if !errors.As(err, &ae) || ae.StatusCode != 500 {
		t.Fatalf("LoadEverywhere()=%v, want a 500 AdminError inside", err)
	}
}

func TestFleet_Healthy(t *testing.T) {
	_, ok := newFakeVLLM(t)
	sick, sickSrv := newFakeVLLM(t)
	sick.health = http.StatusServiceUnavailable
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String() + "/v1"
	ln.Close()

	fleet := &Fleet{Endpoints: []*AdminClient{
		NewAdminClient(ok.URL+"/v1", AdminOptions{}),
		NewAdminClient(sickSrv.URL+"/v1", AdminOptions{}),
		NewAdminClient(gone, AdminOptions{}),
	}}
	errs := fleet.Healthy(context.Background())
	if got, want := len(errs), 3; got != want {
		t.Fatalf("len(Healthy())=%d, want %d", got, want)
	}
	if errs[0] != nil {
		t.Fatalf("healthy endpoint: %v", errs[0])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "503") || !strings.Contains(errs[1].Error(), sickSrv.URL) {
		t.Fatalf("sick endpoint: %v, want a 503 naming it", errs[1])
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), gone) {
		t.Fatalf("gone endpoint: %v, want an error naming %s", errs[2], gone)
	}
}
