package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestCheckFindsDamagedRecords: Check passes a sound store and a missing
// file, and names the record of another run that no longer decodes —
// damage no read of the run being written would meet.
func TestCheckFindsDamagedRecords(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := New(filepath.Join(dir, "none.db"), Options{}).Check(ctx); err != nil {
		t.Fatalf("Check of a missing file: %v", err)
	}
	path := filepath.Join(dir, "grpo.db")
	if err := os.WriteFile(path, realStore(t), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(path, Options{})
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of a sound store: %v", err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(runsBucket).Bucket([]byte("run-1")).Bucket(evaluationsBucket).Put(itob(2), []byte(`{"step":2,"reward_mean":0.`))
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check of a store with a truncated record: %v, want ErrCorrupt", err)
	}
	for _, want := range []string{path, `"runs"/"run-1"/"evaluations"/2`, "in numeric literal", "restore a copy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check: %v; want it to name %s", err, want)
		}
	}
	// The other runs read as before: only Check sees it.
	if _, err := s.GetRun(ctx, "run-0"); err != nil {
		t.Fatalf("GetRun of an undamaged run: %v", err)
	}
}
