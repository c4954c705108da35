package evaluate_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/refmodel"
	"github.com/grpo-dev/grpo/rollout"
)

// faulty fails about half of the chat requests with a 500: whether the
// k-th sending of a given body fails is a coin flip hashed from the body
// and k, so the faults are scattered yet the same whatever the order in
// which concurrent requests arrive.
type faulty struct {
	next     http.Handler
	mu       sync.Mutex
	attempts map[uint64]int
	faults   atomic.Int64
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.URL.Path == "/v1/chat/completions" {
		h := fnv.New64a()
		h.Write(body)
		key := h.Sum64()
		f.mu.Lock()
		k := f.attempts[key]
		f.attempts[key]++
		f.mu.Unlock()
		coin := sha256.Sum256(fmt.Appendf(nil, "%d#%d", key, k))
		if coin[0]&1 == 0 {
			f.faults.Add(1)
			http.Error(w, `{"error":{"message":"injected fault"}}`, http.StatusInternalServerError)
			return
		}
	}
	f.next.ServeHTTP(w, r)
}

func refBackend(t *testing.T) http.Handler {
	t.Helper()
	b, err := refmodel.New(refmodel.Options{DataDir: t.TempDir(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b.InferenceHandler()
}

func refSet() evaluate.Set {
	env := rollout.DefaultEnvConfig()
	env.Rounds = 3
	return evaluate.Set{
		Model: refmodel.BaseModelName, Env: env, Reward: rollout.DefaultRewardConfig(),
		Sampling: rollout.Sampling{Temperature: 1, MaxTokens: 64}, // stochastic
		N:        []int{3, 4}, Episodes: 8, What: "validation",
		Seeds: func(n, e int) (int64, int64) { return 500 + int64(e), rollout.RequestSeed(500, n, e) },
		ID:    func(n, e int) string { return fmt.Sprintf("n%d-e%d", n, e) },
	}
}

func evalAgainst(t *testing.T, h http.Handler, retries, replays int) (evaluate.Result, int, error) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := inference.NewChatClient(srv.URL+"/v1", inference.ChatOptions{
		RequestTimeout: 10 * time.Second, Retry: &httpx.Policy{Retries: retries, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond},
	})
	var replayed atomic.Int64
	res, err := evaluate.Run(context.Background(), evaluate.Options{
		Client: client, Concurrency: 8, Replays: replays, MaxErroredFraction: 0.1,
		OnEpisode: func(ep rollout.Episode) {
			if ep.Replays > 0 {
				replayed.Add(1)
			}
		},
	}, refSet())
	return res, int(replayed.Load()), err
}

// TestReplayKeepsResultsExact: a stochastic evaluation with about half of
// its requests failing gives exactly the figures of the fault-free one,
// because an episode whose call fails for good is replayed from its seeds;
// without replays the same faults fail the evaluation loudly.
func TestReplayKeepsResultsExact(t *testing.T) {
	clean, _, err := evalAgainst(t, refBackend(t), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := &faulty{next: refBackend(t), attempts: map[uint64]int{}}
	// Two retries: a call fails for good when 3 coin flips fail (1 in 8),
	// so most 9-to-12-call episodes need a replay.
	got, replayed, err := evalAgainst(t, f, 2, 40)
	if err != nil {
		t.Fatalf("with faults and replays: %v", err)
	}
	t.Logf("%d faults injected over %d distinct requests, %d of %d episodes replayed", f.faults.Load(), len(f.attempts), replayed, len(got.Episodes))
	if replayed == 0 || f.faults.Load() == 0 {
		t.Fatal("no episode was replayed: the test exercises nothing")
	}
	if got.Stats.Errored != 0 {
		t.Fatalf("%d episodes errored after replays", got.Stats.Errored)
	}
	if !reflect.DeepEqual(got.Stats, clean.Stats) || !reflect.DeepEqual(got.PerN, clean.PerN) {
		t.Fatalf("figures under faults differ:\n got %+v\nwant %+v", got.Stats, clean.Stats)
	}
	for i := range got.Episodes {
		g, w := got.Episodes[i], clean.Episodes[i]
		if g.Reward != w.Reward || !reflect.DeepEqual(g.Metrics, w.Metrics) {
			t.Fatalf("episode %s: reward %v metrics %+v, want %v %+v", g.Spec.ID, g.Reward, g.Metrics, w.Reward, w.Metrics)
		}
	}

	// The same faults without replays: most episodes error, and the
	// evaluation fails rather than report biased figures.
	f2 := &faulty{next: refBackend(t), attempts: map[uint64]int{}}
	_, _, err = evalAgainst(t, f2, 2, 0)
	var tm *evaluate.TooManyErroredError
	if !errors.Is(err, evaluate.ErrTooManyErrored) || !errors.As(err, &tm) || tm.Episodes != 16 || tm.Errored < 2 {
		t.Fatalf("without replays: %v, want ErrTooManyErrored over 16 episodes", err)
	}
	t.Logf("without replays: %v", err)
}

func TestCheckErrored(t *testing.T) {
	eps := make([]rollout.Episode, 20)
	eps[3].Errored, eps[3].Error = true, "boom"
	eps[7].Errored = true
	// 2 of 20 = 0.1: allowed at 0.1, refused at 0.09 and at 0.
	if err := evaluate.CheckErrored(eps, 0.1, "x"); err != nil {
		t.Fatalf("2/20 at 0.1: %v", err)
	}
	err := evaluate.CheckErrored(eps, 0.09, "validation")
	if err == nil || err.Error() != "2 of 20 validation episodes errored even after replays, more than the 0.09 allowed (inference.max_errored_fraction); first error: boom" {
		t.Fatalf("2/20 at 0.09: %v", err)
	}
	if evaluate.CheckErrored(eps, 0, "x") == nil {
		t.Fatal("2/20 at 0: want an error")
	}
	if err := evaluate.CheckErrored(eps, -1, "x"); err != nil {
		t.Fatalf("negative max checks nothing: %v", err)
	}
}
