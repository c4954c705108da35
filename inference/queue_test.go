package inference

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

func TestAIMD(t *testing.T) {
	// inference.concurrency 64 over 2 endpoints: each starts at 32, grows
	// by 64/16 = 4 while busy and unqueued, halves while requests queue.
	a := newAIMD(64)
	if got, want := a.initial(2), 32; got != want {
		t.Fatalf("initial(2)=%d, want %d", got, want)
	}
	if got, want := a.initial(3), 22; got != want { // ceil(64/3)
		t.Fatalf("initial(3)=%d, want %d", got, want)
	}
	if got, want := newAIMD(1).initial(4), 1; got != want {
		t.Fatalf("newAIMD(1).initial(4)=%d, want %d", got, want)
	}
	type reading struct {
		s    QueueStats
		busy bool
		want int
	}
	for _, tc := range []struct {
		name  string
		start int
		seq   []reading
	}{
		{"grows while busy and nothing queues", 32, []reading{
			{QueueStats{Running: 32}, true, 36},
			{QueueStats{Running: 36, KVCacheUsage: 0.5}, true, 40},
			{QueueStats{Running: 40, KVCacheUsage: 0.9}, true, 44},
		}},
		{"idle keeps the limit", 32, []reading{
			{QueueStats{Running: 3}, false, 32},
			{QueueStats{}, false, 32},
		}},
		{"halves when requests wait", 32, []reading{
			{QueueStats{Running: 32, Waiting: 1}, true, 16},
			{QueueStats{Running: 16, Waiting: 5}, true, 8},
			{QueueStats{Running: 8}, true, 12},
			{QueueStats{Running: 12}, true, 16},
		}},
		{"halves when the KV cache is full even without a queue", 40, []reading{
			{QueueStats{Running: 40, KVCacheUsage: 0.95}, true, 20},
			{QueueStats{Running: 20, KVCacheUsage: 0.97}, false, 10},
		}},
		{"never below 1", 2, []reading{
			{QueueStats{Waiting: 9}, true, 1},
			{QueueStats{Waiting: 9}, true, 1},
			{QueueStats{}, true, 5},
		}},
		{"never above the run's concurrency", 60, []reading{
			{QueueStats{Running: 60}, true, 64},
			{QueueStats{Running: 64}, true, 64},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit := tc.start
			for i, r := range tc.seq {
				limit = a.next(limit, r.s, r.busy)
				if limit != r.want {
					t.Fatalf("reading %d %+v busy=%v: limit=%d, want %d", i, r.s, r.busy, limit, r.want)
				}
			}
		})
	}
}

func TestFleet_AdaptsLimitFromMetrics(t *testing.T) {
	// Two endpoints sharing 8: each starts at 4. A reports a queue, B none
	// and no gauges at all (not vLLM): A halves, B keeps its limit.
	a, sa := newFakeVLLM(t)
	a.metrics = "vllm:num_requests_running 4\nvllm:num_requests_waiting 2\nvllm:gpu_cache_usage_perc 0.5\n"
	_, sb := newFakeVLLM(t)
	reg := NewFleetMetrics(prometheus.NewRegistry())
	f := testFleet(t, FleetOptions{Concurrency: 8, Metrics: reg, Run: "r"}, sa.URL, sb.URL)
	if got, want := f.Limits(), []int{4, 4}; !slices.Equal(got, want) {
		t.Fatalf("Limits()=%v, want %v", got, want)
	}
	f.Tick(context.Background())
	if got, want := f.Limits(), []int{2, 4}; !slices.Equal(got, want) {
		t.Fatalf("Limits() after a queue at A=%v, want %v", got, want)
	}
	if got := metricValue(t, reg.limit.WithLabelValues("r", sa.URL+"/v1")); got != 2 {
		t.Fatalf("limit gauge=%v, want 2", got)
	}
	// The queue clears but A was not busy: the limit stays.
	a.set(func(f *fakeVLLM) {
		f.metrics = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.1\n"
	})
	f.Tick(context.Background())
	if got, want := f.Limits(), []int{2, 4}; !slices.Equal(got, want) {
		t.Fatalf("Limits() after an idle reading=%v, want %v", got, want)
	}
}
