package refmodel

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/trainer"
)

// mustOpen opens a Backend on dir and closes it at cleanup.
func mustOpen(tb testing.TB, dir string, seed int64) *Backend {
	tb.Helper()
	b, err := New(Options{DataDir: dir, Seed: seed})
	if err != nil {
		tb.Fatal(err)
	}
	if err := b.Open(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// mustServe opens a Backend and serves it on a loopback httptest server.
func mustServe(tb testing.TB, seed int64) (*Backend, *httptest.Server) {
	tb.Helper()
	b := mustOpen(tb, tb.TempDir(), seed)
	srv := httptest.NewServer(b.Handler())
	tb.Cleanup(srv.Close)
	return b, srv
}

// do sends a JSON request (v marshalled unless it is already []byte or a
// string) and returns the status and body.
func do(tb testing.TB, method, url string, v any) (int, []byte) {
	tb.Helper()
	var body io.Reader
	switch x := v.(type) {
	case nil:
	case string:
		body = bytes.NewReader([]byte(x))
	case []byte:
		body = bytes.NewReader(x)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			tb.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, out
}

// conversation is a philosopher's messages up to a round's observation of s.
func conversation(s rollout.State) []rollout.Message {
	env := rollout.DefaultEnvConfig()
	return []rollout.Message{
		{Role: rollout.RoleSystem, Content: rollout.SystemPrompt(env, s.ID)},
		{Role: rollout.RoleUser, Content: rollout.Observation(s)},
	}
}

// recode is v encoded and decoded as a T: rollout's messages and tools
// in go-openai's types, or back.
func recode[T any](tb testing.TB, v any) T {
	tb.Helper()
	var out T
	b, err := json.Marshal(v)
	if err == nil {
		err = json.Unmarshal(b, &out)
	}
	if err != nil {
		tb.Fatalf("recode %T as %T: %v", v, out, err)
	}
	return out
}

// stateWaitingRight: round 2, holding the left fork, the right one taken.
var stateWaitingRight = rollout.State{
	Round: 2, Rounds: 5, ID: 1, N: 5,
	Holding: rollout.Sides{Left: true},
	Last:    &rollout.LastEvent{Action: rollout.PickUpLeft, OK: true},
}

// stateFirstRound: round 1, nothing held, both forks free.
var stateFirstRound = rollout.State{Round: 1, Rounds: 5, ID: 2, N: 5, Free: rollout.Sides{Left: true, Right: true}}

// waitJob polls a job until it is terminal.
func waitJob(tb testing.TB, url, id string) trainer.Job {
	tb.Helper()
	var j trainer.Job
	terminal := testutil.Eventually(func() bool {
		code, body := do(tb, http.MethodGet, url+"/v1/jobs/"+id, nil)
		if code != http.StatusOK {
			tb.Fatalf("GET job %s: %d %s", id, code, body)
		}
		j = trainer.Job{}
		if err := json.Unmarshal(body, &j); err != nil {
			tb.Fatal(err)
		}
		return trainer.Terminal(j.State)
	})
	if !terminal {
		tb.Fatalf("job %s still %s after %s", id, j.State, testutil.Patience)
	}
	return j
}
