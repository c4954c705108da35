package trainer

import (
	"net/http"
	"testing"

	"github.com/grpo-dev/grpo/internal/httpx"
)

// FuzzDecodeJob feeds decodeJob what a trainer might answer: it must not
// panic, and an accepted answer is a job with the asked id in a known
// state.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		`{"id":"r/step-0001","state":"succeeded","progress":1,"adapter":{"name":"r-step-0001","path":"/a"},"metrics":{"loss":0.5}}`,
		`{"state":"running","progress":0.5}`,
		`{"id":"other","state":"queued"}`,
		`{"id":"r/step-0001","state":"exploded"}`,
		`{"error":"no"}`, `[]`, `null`, ``, `{"id":1}`,
		`{"id":"r/step-0001","state":"failed","error":"CUDA out of memory","metrics":{"loss":"NaN"}}`,
	} {
		f.Add([]byte(s))
	}
	const want = "r/step-0001"
	f.Fuzz(func(t *testing.T, body []byte) {
		a := &httpx.Response{Method: http.MethodGet, URL: "http://127.0.0.1:7000/v1/jobs/" + want, StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: body}
		job, err := decodeJob(a, want)
		if err != nil {
			return
		}
		if job.ID != want || !knownState(job.State) {
			t.Fatalf("decodeJob(%q) accepted job %q in state %q", body, job.ID, job.State)
		}
	})
}
