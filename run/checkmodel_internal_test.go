package run

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/config"
)

// TestCheckModelWarnsOfAnotherBase: a run whose trainer.base_model is
// neither inference.model nor the root an endpoint serves it from is
// warned that its adapters would be loaded onto another base; a base
// named either way, or an endpoint that lists no root, gets no warning.
func TestCheckModelWarnsOfAnotherBase(t *testing.T) {
	serve := func(root string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":"list","data":[{"id":"qwen","object":"model","root":%q},{"id":"qwen-step-1","object":"model","root":"/a/1","parent":"qwen"}]}`, root)
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/v1"
	}
	for _, c := range []struct {
		root, base string
		warn       bool
	}{
		{"/models/qwen3-14b", "/models/qwen3-14b", false}, // the root
		{"/models/qwen3-14b", "qwen", false},              // the served name
		{"", "Qwen/Qwen3-8B", false},                      // no root listed: nothing to compare
		{"/models/qwen3-14b", "Qwen/Qwen3-8B", true},
		{"/models/qwen3-14b", "/a/1", true}, // an adapter's root is not the base's
	} {
		cfg := config.Default()
		cfg.Inference.Model, cfg.Trainer.BaseModel = "qwen", c.base
		var log bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&log, nil))
		if err := checkModel(cfg, listModels(context.Background(), []Endpoint{{URL: serve(c.root)}}), logger); err != nil {
			t.Fatalf("root %q base %q: %v", c.root, c.base, err)
		}
		warned := strings.Contains(log.String(), "trainer.base_model is neither inference.model nor the weights the endpoints serve it from")
		if warned != c.warn || warned && !strings.Contains(log.String(), "served_from="+c.root) {
			t.Errorf("root %q base %q: warned %v, want %v:\n%s", c.root, c.base, warned, c.warn, log.String())
		}
	}
}
