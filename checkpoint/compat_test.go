package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
)

// TestReadsV1Store reads records as the first release wrote them
// (testdata/v1: a 2-step run, and an in-flight job of another run with its
// trajectories cut) and checks that the store, its views and the stored
// config read them as that release did: runs-show.json is its
// `grpo runs show v1 --json`.
func TestReadsV1Store(t *testing.T) {
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "v1", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var steps, evals []json.RawMessage
	if err := json.Unmarshal(read("steps.json"), &steps); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(read("evaluations.json"), &evals); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "v1.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	err = db.Update(func(tx *bolt.Tx) error {
		runs, err := tx.CreateBucket([]byte("runs"))
		if err != nil {
			return err
		}
		b, err := runs.CreateBucket([]byte("v1"))
		if err != nil {
			return err
		}
		sb, err := b.CreateBucket([]byte("steps"))
		if err != nil {
			return err
		}
		eb, err := b.CreateBucket([]byte("evaluations"))
		if err != nil {
			return err
		}
		for i, s := range steps {
			if err := sb.Put(key(i), s); err != nil {
				return err
			}
		}
		for i, e := range evals {
			if err := eb.Put(key(i), e); err != nil {
				return err
			}
		}
		if err := b.Put([]byte("inflight"), read("inflight.json")); err != nil {
			return err
		}
		return b.Put([]byte("run"), read("run.json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	s := checkpoint.New(path, checkpoint.Options{})
	run, st, ev, err := s.Snapshot(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	enc := json.NewEncoder(&got)
	enc.SetIndent("", "  ")
	if err := enc.Encode(checkpoint.NewRunView(run, st, ev)); err != nil {
		t.Fatal(err)
	}
	if want := read("runs-show.json"); !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("NewRunView of the v1 store:\n%s\nwant\n%s", got.Bytes(), want)
	}
	if got, want := run.Policy, checkpoint.PolicyBestValidation; got != want {
		t.Fatalf("policy=%q, want %q", got, want)
	}
	cfg, err := config.FromJSON(run.Config)
	if err != nil {
		t.Fatalf("stored config: %v", err)
	}
	if err := cfg.Validate(); err != nil || cfg.Run.Name != "v1" || cfg.Validation.Metric != checkpoint.MetricMealsMean {
		t.Fatalf("stored config %+v: %v", cfg.Run, err)
	}
	inf, err := s.GetInFlight(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if inf == nil || inf.Step != 7 || inf.JobID != "kk2/step-0007" || inf.OutputAdapter != "kk2-step-0007" || inf.Train == nil || !json.Valid(inf.Request) {
		t.Fatalf("in-flight job=%+v", inf)
	}
}
