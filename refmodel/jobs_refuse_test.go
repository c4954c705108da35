package refmodel

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/trainer"
)

// TestJobRefusals: requests the trainer cannot take are 400s naming the
// field and the limit, as the Python trainer answers them: an id too long
// for its record's directory name, no trajectories, and a parent adapter
// outside the trainer's adapter directory — with one error whether or not
// that path exists, and for a link inside that leads outside.
func TestJobRefusals(t *testing.T) {
	b, srv := mustServe(t, 1)
	sample := oneTurn(stateFirstRound, outThink, 1)
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(b.AdapterDir("x")), 0o755); err != nil {
		t.Fatal(err)
	}
	link := b.AdapterDir("link-out")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		req  trainer.JobRequest
		want string
	}{
		{"300-byte id", jobRequest(strings.Repeat("a", 300), "out", nil, sample), "id: 300 bytes as the name of the job's record directory"},
		{"100 escaped bytes", jobRequest(strings.Repeat("/", 100), "out", nil, sample), "id: 300 bytes as the name of the job's record directory (escaped: each byte other than A-Z a-z 0-9 - . _ ~ takes 3); at most 255"},
		{"no trajectories", jobRequest("j1", "out", nil), "trajectories: at least one trajectory is required"},
		{"parent outside, existing", jobRequest("j2", "out", &trainer.Adapter{Name: "p", Path: outside}, sample), errParentOutside.Error()},
		{"parent outside, missing", jobRequest("j3", "out", &trainer.Adapter{Name: "p", Path: filepath.Join(outside, "nope")}, sample), errParentOutside.Error()},
		{"parent relative", jobRequest("j4", "out", &trainer.Adapter{Name: "p", Path: "adapters/x"}, sample), errParentOutside.Error()},
		{"parent through ..", jobRequest("j5", "out", &trainer.Adapter{Name: "p", Path: b.AdapterDir("..") + "/../x"}, sample), errParentOutside.Error()},
		{"parent linked outside", jobRequest("j6", "out", &trainer.Adapter{Name: "p", Path: link}, sample), errParentOutside.Error()},
	} {
		code, raw := do(t, http.MethodPost, srv.URL+"/v1/jobs", tt.req)
		var e jobError
		json.Unmarshal(raw, &e)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
			t.Errorf("%s: %d %s, want 400 containing %q", tt.name, code, raw, tt.want)
		}
	}
	// 255 escaped bytes are taken.
	if code, _ := createJob(t, srv.URL, jobRequest(strings.Repeat("a", 255), "out", nil, sample)); code != http.StatusAccepted {
		t.Fatalf("create a job of a 255-byte id: %d, want 202", code)
	}
}
