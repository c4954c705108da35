package checkpoint

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// FuzzStoreRecords stores arbitrary bytes as a run's record, a step, an
// evaluation, the in-flight job or the lease, and reads the run back
// through the decoders every Store method uses: none may panic, and a
// record that does not decode is reported as corrupt, naming the file.
// The file is opened once without fsync, so that the fuzzer runs at the
// speed of the decoders rather than of the disk.
func FuzzStoreRecords(f *testing.F) {
	f.Add([]byte(`{"name":"r","state":"running","steps":2}`), byte(0))
	f.Add([]byte(`{"step":1,"n":5,"train":{"groups":[{"rewards":[1]}]}}`), byte(1))
	f.Add([]byte(`{"step":1,"episodes":4,"rewards":[0.5]}`), byte(2))
	f.Add([]byte(`{"step":3,"job_id":"j","request":{}}`), byte(3))
	f.Add([]byte(`{"pid":1,"host":"h","heartbeat":"x"}`), byte(4))
	f.Add([]byte(`null`), byte(0))
	f.Add([]byte(`{`), byte(1))
	path := filepath.Join(f.TempDir(), "f.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, Timeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	s := New(path, Options{})
	run := []byte(`{"name":"r","state":"running","steps":2}`)
	f.Fuzz(func(t *testing.T, v []byte, which byte) {
		err := db.Update(func(tx *bolt.Tx) error {
			tx.DeleteBucket(runsBucket)
			runs, err := tx.CreateBucket(runsBucket)
			if err != nil {
				return err
			}
			b, err := runs.CreateBucket([]byte("r"))
			if err != nil {
				return err
			}
			for _, name := range [][]byte{stepsBucket, evaluationsBucket} {
				if _, err := b.CreateBucket(name); err != nil {
					return err
				}
			}
			if err := b.Put(runKey, run); err != nil {
				return err
			}
			switch which % 5 {
			case 0:
				return b.Put(runKey, v)
			case 1:
				return b.Bucket(stepsBucket).Put(itob(0), v)
			case 2:
				return b.Bucket(evaluationsBucket).Put(itob(0), v)
			case 3:
				return b.Put(inflightKey, v)
			default:
				return b.Put(leaseKey, v)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		check := func(err error) {
			err = s.checkRecords(err)
			var re *recordError
			if errors.As(err, &re) {
				t.Fatalf("record error not turned into corruption: %v", err)
			}
			if errors.Is(err, ErrCorrupt) && (!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "bbolt check")) {
				t.Fatalf("corruption error without the file or the recovery: %v", err)
			}
		}
		db.View(func(tx *bolt.Tx) error {
			b, err := runBucket(tx, "r")
			if err != nil {
				t.Fatal(err)
			}
			_, _, _, err = snapshot(b, "r")
			check(err)
			_, err = getInFlight(b, "r")
			check(err)
			_, err = lastStepOf(b)
			check(err)
			return nil
		})
	})
}

// lastStepOf reads the last step key as LastStep does.
func lastStepOf(b *bolt.Bucket) (int, error) {
	k, _ := lastKey(b.Bucket(stepsBucket))
	return k, nil
}
