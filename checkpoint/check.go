package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// errNotJSON: a record that should be JSON is not.
var errNotJSON = errors.New("not JSON")

// Check reads the whole file — every bucket, key and value — and returns
// an error matching ErrCorrupt, naming the file and the first damage found
// (a page bbolt cannot read, a record that does not decode), or one
// matching ErrNotDatabase. A file that does not exist yet is not damaged.
// Writers check before they add to a file (grpo run, grpo serve): damage
// in another run's records is found before anything is written.
func (s *Store) Check(ctx context.Context) error {
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return checkBucket(ctx, strconv.Quote(string(name)), b)
		})
	})
	if errors.Is(err, ErrNoDatabase) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w", s.path, err)
	}
	return nil
}

// checkBucket reads every value of b and of the buckets nested in it:
// each must be JSON, but a run's count of failed starts (8 bytes).
func checkBucket(ctx context.Context, path string, b *bolt.Bucket) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error {
		where := path + "/" + keyName(k)
		if v == nil {
			nested := b.Bucket(k)
			if nested == nil {
				return badRecord(where, errors.New("a key without value nor bucket"))
			}
			return checkBucket(ctx, where, nested)
		}
		if bytes.Equal(k, startsKey) {
			if len(v) != 8 {
				return badRecord(where, fmt.Errorf("%d bytes, want 8", len(v)))
			}
			return nil
		}
		if !json.Valid(v) {
			return badRecord("record "+where, errNotJSON)
		}
		return nil
	})
}

// keyName is k as a path element: a step number for the big-endian keys
// (8 bytes, the first zero: no name starts with NUL), the quoted name
// otherwise.
func keyName(k []byte) string {
	if len(k) == 8 && k[0] == 0 {
		return strconv.Itoa(btoi(k))
	}
	return strconv.Quote(string(k))
}
