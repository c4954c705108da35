package checkpoint

import (
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// startsKey holds, in a run's bucket, how many times a process started
// playing the run again (a daemon resuming it) since it last committed a
// step: a run that keeps killing the process playing it (out of memory, a
// crash outside the run's goroutine) is then recognised and not resumed
// forever. CommitStep and ResetStarts clear it.
var startsKey = []byte("failed_starts")

// CountStart records that a process starts playing run name again and
// returns the number of such starts since the run last committed a step
// (or ResetStarts), this one included.
func (s *Store) CountStart(ctx context.Context, name string) (int, error) {
	n := 0
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		if n, err = getStarts(b, name); err != nil {
			return err
		}
		n++
		return b.Put(startsKey, binary.BigEndian.AppendUint64(nil, uint64(n)))
	})
	if err != nil {
		return 0, fmt.Errorf("count a start of run %s: %w", name, runNotFound(name, err))
	}
	return n, nil
}

// Starts returns the starts CountStart counted since the run's last
// committed step.
func (s *Store) Starts(ctx context.Context, name string) (int, error) {
	n := 0
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		n, err = getStarts(b, name)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("read the starts of run %s: %w", name, runNotFound(name, err))
	}
	return n, nil
}

// ResetStarts clears the count of starts of run name: its process ended
// cleanly, or a user resumes it by hand.
func (s *Store) ResetStarts(ctx context.Context, name string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		return b.Delete(startsKey)
	})
	if err != nil {
		return fmt.Errorf("reset the starts of run %s: %w", name, runNotFound(name, err))
	}
	return nil
}

func getStarts(b *bolt.Bucket, name string) (int, error) {
	v := b.Get(startsKey)
	switch {
	case v == nil:
		return 0, nil
	case len(v) != 8:
		return 0, badRecord("failed starts of run "+name, fmt.Errorf("%d bytes, want 8", len(v)))
	}
	return int(binary.BigEndian.Uint64(v)), nil
}
