package checkpoint

import (
	"context"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestStarts: CountStart counts 1, 2, 3 ...; CommitStep and ResetStarts
// start the count again; a missing run is ErrRunNotFound; a damaged
// count is a corrupt-store error, not a panic.
func TestStarts(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	if err := s.CreateRun(ctx, Run{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	count := func(want int) {
		t.Helper()
		n, err := s.CountStart(ctx, "r")
		if err != nil || n != want {
			t.Fatalf("CountStart=%d, %v; want %d", n, err, want)
		}
		if got, err := s.Starts(ctx, "r"); err != nil || got != want {
			t.Fatalf("Starts=%d, %v; want %d", got, err, want)
		}
	}
	count(1)
	count(2)
	count(3)
	if err := s.CommitStep(ctx, "r", Step{Step: 0}, nil); err != nil {
		t.Fatal(err)
	}
	count(1)
	count(2)
	if err := s.ResetStarts(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	count(1)
	if _, err := s.CountStart(ctx, "nope"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("CountStart of a missing run: %v, want ErrRunNotFound", err)
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, _ := runBucket(tx, "r")
		return b.Put(startsKey, []byte{1, 2, 3})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CountStart(ctx, "r"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("CountStart of a damaged count: %v, want ErrCorrupt", err)
	}
}
