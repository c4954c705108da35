package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CommitStep records a finished step, and its evaluation if eval is not
// nil, in one transaction that also deletes the in-flight record of this or
// an earlier step. Steps are committed in order from 0 without gaps: a step
// already committed fails with ErrStepExists, any other step but the next
// with ErrStepOutOfOrder. A zero Committed means now. This is what makes a
// resumed run train each step exactly once.
func (s *Store) CommitStep(ctx context.Context, name string, step Step, eval *Evaluation) error {
	if step.Step < 0 {
		return fmt.Errorf("commit step %d of run %s: negative step", step.Step, name)
	}
	if eval != nil && eval.Step != step.Step {
		return fmt.Errorf("commit step %d of run %s: evaluation is of step %d", step.Step, name, eval.Step)
	}
	if step.Committed.IsZero() {
		step.Committed = time.Now().UTC()
	}
	sv, err := json.Marshal(step)
	if err != nil {
		return fmt.Errorf("commit step %d of run %s: encode step: %w", step.Step, name, err)
	}
	var ev []byte
	if eval != nil {
		if ev, err = json.Marshal(eval); err != nil {
			return fmt.Errorf("commit step %d of run %s: encode evaluation: %w", step.Step, name, err)
		}
	}

	err = s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		return commitStep(b, name, step, eval, sv, ev)
	})
	if err != nil {
		return fmt.Errorf("commit step %d of run %s: %w", step.Step, name, err)
	}
	return nil
}

// commitStep is CommitStep in the transaction of run name's bucket b: sv
// and ev are step and eval encoded.
func commitStep(b *bolt.Bucket, name string, step Step, eval *Evaluation, sv, ev []byte) error {
	steps, err := b.CreateBucketIfNotExists(stepsBucket)
	if err != nil {
		return err
	}
	next := 0
	if last, ok := lastKey(steps); ok {
		next = last + 1
	}
	switch {
	case step.Step < next:
		return ErrStepExists
	case step.Step > next:
		return fmt.Errorf("%w: the next step is %d", ErrStepOutOfOrder, next)
	}
	// The summary as it was before this step (built from the steps
	// so far, if the run has none stored yet), then advanced by it.
	run, err := getRun(b, name)
	if err != nil {
		return err
	}
	sum, _, err := summaryOf(b, name)
	if err != nil {
		return err
	}
	if err := steps.Put(itob(step.Step), sv); err != nil {
		return err
	}
	if ev != nil {
		evals, err := b.CreateBucketIfNotExists(evaluationsBucket)
		if err != nil {
			return err
		}
		if err := evals.Put(itob(step.Step), ev); err != nil {
			return err
		}
	}
	inf, err := getInFlight(b, name)
	if err != nil {
		return err
	}
	if inf != nil && inf.Step <= step.Step {
		if next := inf.Next; next != nil && next.Step > step.Step {
			if err := putInFlight(b, *next); err != nil {
				return err
			}
		} else if err := b.Delete(inflightKey); err != nil {
			return err
		}
	}
	// Progress: the starts without it start again from zero.
	if err := b.Delete(startsKey); err != nil {
		return err
	}
	var evalErr error
	sum.advance(run, step, eval, func(s int) *Evaluation {
		ev, err := getEvaluationHead(b, name, s)
		evalErr = cmp.Or(evalErr, err)
		return ev
	})
	if evalErr != nil {
		return evalErr
	}
	if err := putSummary(b, sum); err != nil {
		return err
	}
	run.Updated = step.Committed
	return putRun(b, run)
}

// LastStep returns a run's last committed step; ok is false when none is.
func (s *Store) LastStep(ctx context.Context, name string) (step int, ok bool, err error) {
	err = s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		step, ok = lastKey(b.Bucket(stepsBucket))
		return nil
	})
	if err != nil {
		return 0, false, runNotFound(name, err)
	}
	return step, ok, nil
}

// SetInFlight records the trainer job submitted for a step not yet
// committed. It replaces a record of the same or a later step; a record
// of an earlier step not yet committed (being validated) keeps it as its
// Next, until that step commits. A committed step fails with
// ErrStepExists.
func (s *Store) SetInFlight(ctx context.Context, name string, inf InFlight) error {
	inf.Next = nil
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		last, ok := lastKey(b.Bucket(stepsBucket))
		if ok && inf.Step <= last {
			return fmt.Errorf("step %d: %w", inf.Step, ErrStepExists)
		}
		cur, err := getInFlight(b, name)
		if err != nil {
			return err
		}
		if cur != nil && cur.Step < inf.Step && (!ok || cur.Step > last) {
			cur.Next = &inf
			return putInFlight(b, *cur)
		}
		return putInFlight(b, inf)
	})
	if err != nil {
		return fmt.Errorf("set in-flight job of run %s: %w", name, err)
	}
	return nil
}

func putInFlight(b *bolt.Bucket, inf InFlight) error {
	v, err := json.Marshal(inf)
	if err != nil {
		return fmt.Errorf("encode: %w", err)
	}
	return b.Put(inflightKey, v)
}

// GetInFlight returns a run's in-flight job, or nil when there is none.
func (s *Store) GetInFlight(ctx context.Context, name string) (*InFlight, error) {
	var inf *InFlight
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		inf, err = getInFlight(b, name)
		return err
	})
	if err != nil {
		return nil, runNotFound(name, err)
	}
	return inf, nil
}

func getInFlight(b *bolt.Bucket, name string) (*InFlight, error) {
	v := b.Get(inflightKey)
	if v == nil {
		return nil, nil
	}
	var inf InFlight
	if err := json.Unmarshal(v, &inf); err != nil {
		return nil, badRecord("in-flight job of run "+name, err)
	}
	return &inf, nil
}

// lastKey returns the last step key of bucket b; ok is false when b is
// empty or nil.
func lastKey(b *bolt.Bucket) (int, bool) {
	if b == nil {
		return 0, false
	}
	k, _ := b.Cursor().Last()
	if k == nil {
		return 0, false
	}
	return btoi(k), true
}
