package inference

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/internal/httpx"
)

func TestProbe_OpenAICompatible(t *testing.T) {
	_, srv := newFakeVLLM(t)
	if err := probe(srv.URL + "/v1"); err != nil {
		t.Fatal(err)
	}
	// An empty list is still an OpenAI model list.
	empty := staticServer(t, http.StatusOK, "application/json", `{"object":"list","data":[]}`)
	if err := probe(empty.URL + "/v1"); err != nil {
		t.Fatal(err)
	}
}

func TestProbe_NotOpenAI(t *testing.T) {
	for _, tt := range []struct {
		name        string
		code        int
		contentType string
		body        string
		suffix      string
		want        []string
	}{
		{
			name: "html 404 without /v1", code: 404, contentType: "text/html",
			body:   "<html><head><title>404 Not Found</title></head></html>",
			suffix: "",
			want:   []string{"/models answered 404 text/html", "expected an OpenAI-compatible /v1/models JSON list", "does the URL end in /v1?", "<title>404"},
		},
		{
			name: "html 200 dashboard", code: 200, contentType: "text/html; charset=utf-8",
			body:   "<!doctype html><html><body>Grafana</body></html>",
			suffix: "/v1",
			want:   []string{"/v1/models answered 200 text/html", "expected an OpenAI-compatible", "Grafana"},
		},
		{
			name: "json not a list", code: 200, contentType: "application/json",
			body:   `{"status":"ok"}`,
			suffix: "/v1",
			want:   []string{"/v1/models answered 200 application/json", `{\"status\":\"ok\"}`},
		},
		{
			name: "data not an array", code: 200, contentType: "application/json",
			body:   `{"object":"list","data":"nope"}`,
			suffix: "/v1",
			want:   []string{"expected an OpenAI-compatible /v1/models JSON list"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := staticServer(t, tt.code, tt.contentType, tt.body)
			err := probe(srv.URL + tt.suffix)
			if err == nil {
				t.Fatal("Probe() accepted a server that is not OpenAI-compatible")
			}
			for _, want := range append(tt.want, srv.URL+tt.suffix+"/models") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if got := strings.Count(err.Error(), srv.URL+tt.suffix); got != 1 {
				t.Errorf("error %q names %s %d times, want once", err, srv.URL+tt.suffix, got)
			}
			if tt.suffix == "/v1" && strings.Contains(err.Error(), "does the URL end in /v1?") {
				t.Errorf("error %q asks about /v1 for a URL that has it", err)
			}
		})
	}
}

func TestProbe_ConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/v1"
	ln.Close()
	err = probe(url)
	if err == nil || strings.Count(err.Error(), url) != 1 {
		t.Fatalf("Probe()=%v, want an error naming %s once", err, url)
	}
}

// probe probes baseURL with a client that does not retry.
func probe(baseURL string) error {
	return NewAdminClient(baseURL, AdminOptions{Retry: &httpx.Policy{}}).Probe(context.Background())
}
