package evaluate_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// fakeAdapters records loads and unloads; served is what the endpoints
// served before the evaluation.
type fakeAdapters struct {
	mu               sync.Mutex
	served           map[string]bool
	loaded, unloaded []string
	failLoad         string
}

func (f *fakeAdapters) LoadEverywhere(_ context.Context, name, path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if name == f.failLoad {
		return errors.New("no such directory")
	}
	f.loaded = append(f.loaded, name+"@"+path)
	return nil
}

func (f *fakeAdapters) UnloadEverywhere(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unloaded = append(f.unloaded, name)
	return nil
}

func (f *fakeAdapters) Served(context.Context) map[string]bool { return f.served }

func checkpointsConfig() config.Config {
	cfg := config.Default()
	cfg.Run.Name = "r"
	cfg.Inference.Model = "base"
	return cfg
}

// TestRunCheckpoints: each step is measured once (best may be last) with
// its adapter loaded under its own name, each result is kept as it is
// taken, and only the adapters the endpoints did not serve before are
// unloaded after.
func TestRunCheckpoints(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	client := inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{RequestTimeout: 10 * time.Second})
	a := &fakeAdapters{served: map[string]bool{"base": true, "r-step-0002": true}}
	var kept []int
	cps := []evaluate.Checkpoint{
		{Step: 3, Adapter: &checkpoint.Adapter{Name: "r-step-0003", Path: "/d/3"}}, // best
		{Step: 3, Adapter: &checkpoint.Adapter{Name: "r-step-0003", Path: "/d/3"}}, // last
		{Step: 0},
		{Step: 2, Adapter: &checkpoint.Adapter{Name: "r-step-0002", Path: "/d/2"}},
	}
	done, err := evaluate.RunCheckpoints(context.Background(), evaluate.Options{Client: client, Concurrency: 4}, a, evaluate.Checkpoints{
		Config: checkpointsConfig(), Checkpoints: cps, N: []int{5, 7}, Episodes: 2,
		Keep: func(step int, res evaluate.Result) error { kept = append(kept, step); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kept, []int{3, 0, 2}; !slices.Equal(got, want) {
		t.Fatalf("kept steps %v, want %v", got, want)
	}
	for step, model := range map[int]string{0: "base", 2: "r-step-0002", 3: "r-step-0003"} {
		eps := done[step].Episodes
		if got, want := len(eps), 4; got != want {
			t.Fatalf("step %d: %d episodes, want %d", step, got, want)
		}
		if got := eps[0].Spec.Model; got != model {
			t.Fatalf("step %d played model %q, want %q", step, got, model)
		}
		if got, want := len(done[step].PerN), 2; got != want {
			t.Fatalf("step %d: %d table sizes, want %d", step, got, want)
		}
	}
	if got, want := a.loaded, []string{"r-step-0003@/d/3", "r-step-0002@/d/2"}; !slices.Equal(got, want) {
		t.Fatalf("loaded %v, want %v", got, want)
	}
	if got, want := a.unloaded, []string{"r-step-0003"}; !slices.Equal(got, want) {
		t.Fatalf("unloaded %v, want %v (r-step-0002 was served before)", got, want)
	}
}

// TestRunCheckpointsLoadFails: an adapter that cannot be loaded fails the
// evaluation with the run, step, adapter and path named, after unloading
// what was loaded before it.
func TestRunCheckpointsLoadFails(t *testing.T) {
	srv := rollouttest.New(rollouttest.WorkedExample)
	defer srv.Close()
	client := inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{RequestTimeout: 10 * time.Second})
	a := &fakeAdapters{failLoad: "r-step-0004"}
	_, err := evaluate.RunCheckpoints(context.Background(), evaluate.Options{Client: client, Concurrency: 4}, a, evaluate.Checkpoints{
		Config: checkpointsConfig(), N: []int{5}, Episodes: 1,
		Checkpoints: []evaluate.Checkpoint{
			{Step: 1, Adapter: &checkpoint.Adapter{Name: "r-step-0001", Path: "/d/1"}},
			{Step: 4, Adapter: &checkpoint.Adapter{Name: "r-step-0004", Path: "/d/4"}},
		},
	})
	if err == nil || !strings.Contains(err.Error(), "run r step 4: load adapter r-step-0004 from /d/4: no such directory") {
		t.Fatalf("err=%v, want the run, step, adapter and path named", err)
	}
	if got, want := a.unloaded, []string{"r-step-0001"}; !slices.Equal(got, want) {
		t.Fatalf("unloaded %v, want %v", got, want)
	}
}
