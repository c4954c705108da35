package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// testsBucket holds held-out measurements of a run's checkpoints other
// than validation: tests/<split>/<big-endian step> -> TestEvaluation.
var testsBucket = []byte("tests")

// SplitTest is the split `grpo eval --run` and the end-of-run summary
// measure checkpoints on (DESIGN §11).
const SplitTest = "test"

// TestEvaluation is one checkpoint measured on a held-out split: tables
// seeded Seed, Seed+1, ... at each size of Evaluation.PerN, every episode
// in Evaluation.Records. A later measurement of the same step and split
// replaces it.
type TestEvaluation struct {
	Split      string     `json:"split"`
	Seed       int64      `json:"seed"`
	Evaluation Evaluation `json:"evaluation"`
}

// PutTestEvaluation stores te for run name, keyed by its split and step.
func (s *Store) PutTestEvaluation(ctx context.Context, name string, te TestEvaluation) error {
	if te.Split == "" {
		return fmt.Errorf("store test evaluation of run %s step %d: no split", name, te.Evaluation.Step)
	}
	if te.Evaluation.Step < 0 {
		return fmt.Errorf("store test evaluation of run %s: negative step %d", name, te.Evaluation.Step)
	}
	v, err := json.Marshal(te)
	if err != nil {
		return fmt.Errorf("store test evaluation of run %s step %d: %w", name, te.Evaluation.Step, err)
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		tests, err := b.CreateBucketIfNotExists(testsBucket)
		if err != nil {
			return err
		}
		split, err := tests.CreateBucketIfNotExists([]byte(te.Split))
		if err != nil {
			return err
		}
		return split.Put(itob(te.Evaluation.Step), v)
	})
	if err != nil {
		return fmt.Errorf("store %s evaluation of run %s step %d: %w", te.Split, name, te.Evaluation.Step, err)
	}
	return nil
}

// TestEvaluations returns run name's stored measurements on split, in step
// order; none is an empty list.
func (s *Store) TestEvaluations(ctx context.Context, name, split string) ([]TestEvaluation, error) {
	var out []TestEvaluation
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		var sb *bolt.Bucket
		if tests := b.Bucket(testsBucket); tests != nil {
			sb = tests.Bucket([]byte(split))
		}
		out, err = decodeAll[TestEvaluation](sb, name, split+" evaluation")
		return err
	})
	if err != nil {
		return nil, runNotFound(name, err)
	}
	return out, nil
}
