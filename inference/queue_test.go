package inference

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
)

func TestAdminClient_Load(t *testing.T) {
	page, err := os.ReadFile("testdata/vllm_metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	f, srv := newFakeVLLM(t)
	f.metrics = string(page)
	got, err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := (QueueStats{Running: 12, Waiting: 3, KVCacheUsage: 0.4375}); got != want {
		t.Fatalf("Load()=%+v, want %+v", got, want)
	}
}

func TestParseQueueStats(t *testing.T) {
	for _, tt := range []struct {
		name, page string
		want       QueueStats
	}{
		{
			name: "two engines",
			page: `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
vllm:num_requests_running{engine="1",model_name="m"} 6.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
`,
			want: QueueStats{Running: 10, Waiting: 2, KVCacheUsage: 0.5},
		},
		{
			name: "old vLLM gpu cache gauge, untyped",
			page: `vllm:num_requests_running{model_name="m"} 1
vllm:num_requests_waiting{model_name="m"} 7
vllm:gpu_cache_usage_perc{model_name="m"} 0.125
`,
			want: QueueStats{Running: 1, Waiting: 7, KVCacheUsage: 0.125},
		},
		{
			name: "no cache gauge",
			page: "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n",
			want: QueueStats{},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseQueueStats([]byte(tt.page))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("parseQueueStats()=%+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAdminClient_Load_Garbage(t *testing.T) {
	for _, tt := range []struct {
		name, contentType, body, want string
	}{
		{"html", "text/html", "<html><body>Not a metrics page</body></html>", `"<html><body>Not a metrics page`},
		{"not vllm", "text/plain", "# TYPE go_goroutines gauge\ngo_goroutines 12\n", "is this a vLLM server?"},
		{"empty", "text/plain", "", "is this a vLLM server?"},
		{"bad value", "text/plain", "vllm:num_requests_running lots\n", `"vllm:num_requests_running lots"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := staticServer(t, http.StatusOK, tt.contentType, tt.body)
			_, err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).Load(context.Background())
			if err == nil {
				t.Fatal("Load() accepted garbage")
			}
			for _, want := range []string{srv.URL + "/metrics", tt.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestAdminClient_Load_Status(t *testing.T) {
	srv := staticServer(t, http.StatusInternalServerError, "text/plain", "engine dead")
	_, err := NewAdminClient(srv.URL+"/v1", AdminOptions{}).Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "engine dead") {
		t.Fatalf("Load()=%v, want the status and body", err)
	}
}

func FuzzParseQueueStats(f *testing.F) {
	page, err := os.ReadFile("testdata/vllm_metrics.txt")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(page)
	f.Add([]byte("<html></html>"))
	f.Add([]byte("vllm:num_requests_running{a=\"b\"} NaN\nvllm:num_requests_waiting +Inf\n"))
	f.Fuzz(func(t *testing.T, page []byte) {
		s, err := parseQueueStats(page)
		if err != nil && s != (QueueStats{}) {
			t.Fatalf("parseQueueStats() returned %+v with error %v", s, err)
		}
	})
}
