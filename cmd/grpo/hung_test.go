package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/internal/testutil"
	"github.com/grpo-dev/grpo/refmodel"
)

// TestRunStartsPastHungReplica (the real binary): of two inference
// endpoints one accepts connections and never answers; 'grpo run' drains
// it when the start's deadline passes and trains on the other, and so
// does a resume of the run.
func TestRunStartsPastHungReplica(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	b := refBackend(t, 1)
	trainer := httptest.NewServer(b.TrainerHandler())
	t.Cleanup(trainer.Close)
	good := httptest.NewServer(b.InferenceHandler())
	t.Cleanup(good.Close)
	hung := testutil.HungServer(t) + "/v1"
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`run: {name: h, steps: 2, seed: 4}
validation: {episodes: 2}
inference: {model: %s, endpoints: [{url: %s}, {url: %s/v1}]}
trainer: {kind: jobs, url: %s, base_model: %s}
`, refmodel.BaseModelName, hung, good.URL, trainer.URL, refmodel.BaseModelName)), 0o644)
	db := filepath.Join(dir, "grpo.db")
	out, err := exec.Command(bin, "run", "--config", cfg, "--db", db, "--quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("grpo run: %v\n%s", err, out)
	}
	if got := results(t, bin, db, "h"); !strings.HasPrefix(got, "succeeded\n") {
		t.Fatalf("run: %s", got)
	}
	if !strings.Contains(string(out), hung) {
		t.Fatalf("grpo run did not say which endpoint it started without:\n%s", out)
	}

	// A run whose process died: resumed, it starts past the hung
	// replica again.
	store := checkpoint.New(db, checkpoint.Options{})
	if err := store.SetRunState(context.Background(), "h", checkpoint.StateRunning, ""); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "run", "--resume", "h", "--db", db, "--quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("grpo run --resume: %v\n%s", err, out)
	}
	if got := results(t, bin, db, "h"); !strings.HasPrefix(got, "succeeded\n") {
		t.Fatalf("resumed run: %s", got)
	}
}
