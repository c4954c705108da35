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

// Check reads the whole file — every run and every record in it, decoded
// as the readers decode them — and returns an error matching ErrCorrupt,
// naming the file and the first damage found (a page bbolt cannot read, a
// record that does not decode), or one matching ErrNotDatabase. A file
// that does not exist yet is not damaged. Writers check before they add to
// a file (grpo run, grpo serve): damage in another run's records is found
// before anything is written.
func (s *Store) Check(ctx context.Context) error {
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if !bytes.Equal(name, runsBucket) {
				return checkBucket(ctx, quote(name), b, nil)
			}
			return b.ForEach(func(run, v []byte) error {
				rb := b.Bucket(run)
				if v != nil || rb == nil {
					return badRecord(quote(name)+"/"+quote(run), errors.New("a value where a run's bucket belongs"))
				}
				if rb.Get(runKey) == nil {
					return badRecord("run "+quote(run), errors.New("record missing"))
				}
				return checkBucket(ctx, quote(name)+"/"+quote(run), rb, runRecord)
			})
		})
	})
	if errors.Is(err, ErrNoDatabase) {
		return nil
	}
	return err // names the file
}

// record returns the value a record at path decodes into, nil for a
// record of no known type (checked to be JSON), or a decoder of its own.
type record func(path []string) (into any, raw func([]byte) error)

// runRecord knows the records of a run's bucket (path relative to it).
func runRecord(path []string) (any, func([]byte) error) {
	switch {
	case len(path) == 1 && path[0] == string(runKey):
		return &Run{}, nil
	case len(path) == 1 && path[0] == string(leaseKey):
		return &LeaseInfo{}, nil
	case len(path) == 1 && path[0] == string(inflightKey):
		return &InFlight{}, nil
	case len(path) == 1 && path[0] == string(summaryKey):
		return &summaryRecord{}, nil
	case len(path) == 1 && path[0] == string(startsKey):
		return nil, func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%d bytes, want 8", len(v))
			}
			return nil
		}
	case len(path) == 2 && path[0] == string(stepsBucket):
		return &Step{}, nil
	case len(path) == 2 && path[0] == string(evaluationsBucket):
		return &Evaluation{}, nil
	case len(path) == 3 && path[0] == string(testsBucket):
		return &TestEvaluation{}, nil
	}
	return nil, nil
}

// checkBucket decodes every value of b and of the buckets nested in it,
// each as kind says (nil: JSON of any shape).
func checkBucket(ctx context.Context, where string, b *bolt.Bucket, kind record) error {
	return walk(ctx, where, nil, b, kind)
}

func walk(ctx context.Context, where string, path []string, b *bolt.Bucket, kind record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error {
		at, p := where+"/"+keyName(k), append(path[:len(path):len(path)], string(k))
		if v == nil {
			nested := b.Bucket(k)
			if nested == nil {
				return badRecord(at, errors.New("a key without value nor bucket"))
			}
			return walk(ctx, at, p, nested, kind)
		}
		var into any
		var raw func([]byte) error
		if kind != nil {
			into, raw = kind(p)
		}
		var err error
		switch {
		case raw != nil:
			err = raw(v)
		case into != nil:
			err = json.Unmarshal(v, into)
		case !json.Valid(v):
			err = errors.New("not JSON")
		}
		if err != nil {
			return badRecord("record "+at, err)
		}
		return nil
	})
}

// quote is a bucket name as a path element.
func quote(name []byte) string { return strconv.Quote(string(name)) }

// keyName is k as a path element: a step number for the big-endian keys
// (8 bytes, the first zero: no name starts with NUL), the quoted name
// otherwise.
func keyName(k []byte) string {
	if len(k) == 8 && k[0] == 0 {
		return strconv.Itoa(btoi(k))
	}
	return quote(k)
}
