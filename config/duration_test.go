package config_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/config"
)

func TestDuration_YAML(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{"60s", 60 * time.Second},
		{"30m", 30 * time.Minute},
		{"1h30m", 90 * time.Minute},
		{"250ms", 250 * time.Millisecond},
		{"1.5s", 1500 * time.Millisecond},
		{"0", 0},
		{"0.0", 0},
	} {
		c := mustParse(t, "inference: {request_timeout: "+tt.in+"}")
		if got := time.Duration(c.Inference.RequestTimeout); got != tt.want {
			t.Errorf("request_timeout: %s = %v, want %v", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"inference: {request_timeout: soon}", `line 1, column 30: inference.request_timeout: "soon" is not a duration; write it like 60s, 30m or 1h30m`},
		{"trainer:\n  job_timeout: 30 minutes\n", `line 2, column 16: trainer.job_timeout: "30 minutes" is not a duration`},
		{"trainer:\n  job_timeout: [30m]\n", `line 2, column 16: trainer.job_timeout: expected a duration like 60s, 30m or 1h30m`},
		// A bare number has no unit: refused at its line, for every
		// duration key (it was read as seconds).
		{"trainer:\n  job_timeout: 30\n", `line 2, column 16: trainer.job_timeout: 30 has no unit; write 30s, 30m or 30h`},
		{"trainer:\n  job_timeout: '30'\n", `line 2, column 16: trainer.job_timeout: 30 has no unit; write 30s, 30m or 30h`},
		{"inference: {request_timeout: 1.5}", `line 1, column 30: inference.request_timeout: 1.5 has no unit; write 1.5s, 1.5m or 1.5h`},
		{"inference:\n  retry_budget: 120\n", `line 2, column 17: inference.retry_budget: 120 has no unit; write 120s, 120m or 120h`},
		{"inference:\n  outage_window: 5\n", `line 2, column 18: inference.outage_window: 5 has no unit; write 5s, 5m or 5h`},
		{`{"trainer": {"job_timeout": 120}}`, `line 1, column 29: trainer.job_timeout: 120 has no unit; write 120s, 120m or 120h`},
		{`{"inference": {"request_timeout": true}}`, `line 1, column 35: inference.request_timeout: "true" is not a duration`},
	} {
		_, err := config.Parse([]byte(tt.in))
		if got := errString(err); !strings.HasPrefix(got, tt.want) {
			t.Errorf("Parse(%q)=%q, want prefix %q", tt.in, got, tt.want)
		}
	}
}

func TestDuration_JSON(t *testing.T) {
	b, err := json.Marshal(config.Duration(90 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `"1m30s"`; got != want {
		t.Fatalf("Marshal=%s, want %s", got, want)
	}
	for _, tt := range []struct {
		in   string
		want time.Duration
	}{
		{`"1m30s"`, 90 * time.Second},
		{`"5s"`, 5 * time.Second},
		{`0`, 0},
	} {
		var d config.Duration
		if err := json.Unmarshal([]byte(tt.in), &d); err != nil {
			t.Fatalf("Unmarshal(%s): %v", tt.in, err)
		}
		if got := time.Duration(d); got != tt.want {
			t.Errorf("Unmarshal(%s)=%v, want %v", tt.in, got, tt.want)
		}
	}
	d := config.Duration(time.Second)
	if err := json.Unmarshal([]byte(`null`), &d); err != nil || d != config.Duration(time.Second) {
		t.Fatalf("Unmarshal(null)=%v, %v; want 1s unchanged", d, err)
	}
	for _, in := range []string{`"soon"`, `true`, `{}`, `"1e400"`, `12`, `"7"`} {
		if err := json.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%s)=%v, want an error", in, d)
		}
	}
}
