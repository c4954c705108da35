package checkpoint

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// FuzzStoreRecords writes arbitrary bytes as a run's record, a step, an
// evaluation, the in-flight job and the lease, then reads the run back
// with every method: none may panic, and a record that does not decode
// is an ErrCorrupt naming the file.
func FuzzStoreRecords(f *testing.F) {
	f.Add([]byte(`{"name":"r","state":"running","steps":2}`), byte(0))
	f.Add([]byte(`{"step":1,"n":5,"train":{"groups":[{"rewards":[1]}]}}`), byte(1))
	f.Add([]byte(`{"step":1,"episodes":4,"rewards":[0.5]}`), byte(2))
	f.Add([]byte(`{"step":3,"job_id":"j","request":{}}`), byte(3))
	f.Add([]byte(`{"pid":1,"host":"h","heartbeat":"x"}`), byte(4))
	f.Add([]byte(`null`), byte(0))
	f.Add([]byte(`{`), byte(1))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, v []byte, which byte) {
		ctx := context.Background()
		s := New(filepath.Join(dir, "f.db"), Options{})
		if err := s.update(ctx, func(tx *bolt.Tx) error {
			tx.Bucket(runsBucket).DeleteBucket([]byte("r"))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateRun(ctx, Run{Name: "r", Steps: 2, Policy: PolicyBestValidation, Metric: MetricRewardMean}); err != nil {
			t.Fatal(err)
		}
		if err := s.update(ctx, func(tx *bolt.Tx) error {
			b := tx.Bucket(runsBucket).Bucket([]byte("r"))
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
		}); err != nil {
			t.Fatal(err)
		}
		check := func(err error) {
			if errors.Is(err, ErrCorrupt) && !strings.Contains(err.Error(), s.Path()) {
				t.Fatalf("corruption error without the file: %v", err)
			}
		}
		_, _, _, err := s.Snapshot(ctx, "r")
		check(err)
		_, err = s.ListRuns(ctx)
		check(err)
		_, err = s.GetInFlight(ctx, "r")
		check(err)
		_, _, err = s.GetLease(ctx, "r", LeaseOptions{})
		check(err)
		_, err = s.AcquireLease(ctx, "r", LeaseOptions{})
		check(err)
		check(s.CancelRun(ctx, "r", "x", LeaseOptions{}))
	})
}
