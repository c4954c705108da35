package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/internal/testutil"
	bolt "go.etcd.io/bbolt"
)

// TestNothingWrittenIntoADamagedStore: a store whose one run has a record
// that no longer decodes refuses a new run, a resume, a test measurement
// and a daemon, each naming the file and the recovery, and gains nothing.
func TestNothingWrittenIntoADamagedStore(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(cfg, []byte(smallRun), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "x.db")
	if code, _, errs := cli(t, "run", "--config", cfg, "--db", db, "--steps", "1"); code != 0 {
		t.Fatalf("run: exit %d\n%s", code, errs)
	}
	// Damage the stored run's step 1 evaluation, as a bad disk would.
	key := binary.BigEndian.AppendUint64(nil, 1)
	damage := func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("runs")).Bucket([]byte("small")).Bucket([]byte("evaluations")).Put(key, []byte("{\"step\":1,\x00\x13"))
	}
	if err := boltDo(db, damage); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, code int, errs string) {
		t.Helper()
		for _, want := range []string{db, "is corrupt", `"small"/"evaluations"/1`, "restore a copy"} {
			if code == 0 || !strings.Contains(errs, want) {
				t.Errorf("%s on a damaged store: exit %d, stderr %q; want a refusal naming %s", what, code, errs, want)
			}
		}
	}
	code, _, errs := cli(t, "run", "--config", cfg, "--db", db, "--name", "other", "--steps", "1")
	refused("run", code, errs)
	code, _, errs = cli(t, "run", "--resume", "small", "--db", db)
	refused("run --resume", code, errs)
	code, _, errs = cli(t, "eval", "--db", db, "--run", "small", "--step", "0", "--episodes", "2")
	refused("eval --run", code, errs)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var serveErr testutil.Buffer
	m := &Main{Stdin: strings.NewReader(""), Stdout: &testutil.Buffer{}, Stderr: &serveErr, Getenv: func(string) string { return "" }}
	code = m.Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--data-dir", filepath.Join(dir, "data")})
	if ctx.Err() != nil {
		t.Fatal("the daemon started on a damaged store")
	}
	refused("serve", code, serveErr.String())

	after, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatal("the damaged store was written to")
	}
}

// boltDo runs fn in a read-write transaction on the bbolt file path.
func boltDo(path string, fn func(*bolt.Tx) error) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}
