package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CreateRun records a new run. A zero State means running; zero Created
// and Updated mean now; an empty ID gets a random one (NewRunID). It fails
// with ErrRunExists if the name is taken.
func (s *Store) CreateRun(ctx context.Context, run Run) error {
	if err := ValidateRunName(run.Name); err != nil {
		return fmt.Errorf("create run: %w", err)
	}
	if run.ID == "" {
		run.ID = NewRunID()
	}
	if run.State == "" {
		run.State = StateRunning
	}
	if err := validState(run.State); err != nil {
		return fmt.Errorf("create run %s: %w", run.Name, err)
	}
	now := time.Now().UTC()
	if run.Created.IsZero() {
		run.Created = now
	}
	if run.Updated.IsZero() {
		run.Updated = run.Created
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs := tx.Bucket(runsBucket)
		if runs.Bucket([]byte(run.Name)) != nil {
			return ErrRunExists
		}
		b, err := runs.CreateBucket([]byte(run.Name))
		if err != nil {
			return err
		}
		if _, err := b.CreateBucket(stepsBucket); err != nil {
			return err
		}
		if _, err := b.CreateBucket(evaluationsBucket); err != nil {
			return err
		}
		return putRun(b, run)
	})
	if err != nil {
		return fmt.Errorf("create run %s: %w", run.Name, err)
	}
	return nil
}

// GetRun returns the record of run name.
func (s *Store) GetRun(ctx context.Context, name string) (Run, error) {
	var run Run
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		run, err = getRun(b, name)
		return err
	})
	return run, runNotFound(name, err)
}

// SetRunState sets a run's state and error message and stamps Updated.
func (s *Store) SetRunState(ctx context.Context, name, state, errMsg string) error {
	if err := validState(state); err != nil {
		return fmt.Errorf("set state of run %s: %w", name, err)
	}
	err := s.updateRun(ctx, name, func(run *Run) error {
		run.State, run.Error, run.Updated = state, errMsg, time.Now().UTC()
		return nil
	})
	if err != nil {
		return fmt.Errorf("set state of run %s: %w", name, err)
	}
	return nil
}

// updateRun reads run name's record, lets change edit it, and stores it,
// in one transaction; an error from change stores nothing.
func (s *Store) updateRun(ctx context.Context, name string, change func(*Run) error) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		run, err := getRun(b, name)
		if err != nil {
			return err
		}
		if err := change(&run); err != nil {
			return err
		}
		return putRun(b, run)
	})
}

// ExtendRun raises run name's planned steps to steps and stores config,
// its config with run.steps raised to match, so that a resume plays the
// steps added. It refuses steps not above the planned ones: only adding
// steps leaves the steps already committed as they would have been.
func (s *Store) ExtendRun(ctx context.Context, name string, steps int, config json.RawMessage) error {
	err := s.updateRun(ctx, name, func(run *Run) error {
		if steps <= run.Steps {
			return fmt.Errorf("%d steps is not more than the %d planned", steps, run.Steps)
		}
		run.Steps, run.Config, run.Updated = steps, config, time.Now().UTC()
		return nil
	})
	if err != nil {
		return fmt.Errorf("extend run %s: %w", name, runNotFound(name, err))
	}
	return nil
}

// SetRunConfig stores config as run name's config: the same training on
// other servers or with other timeouts (run.Options.Relocate), so that a
// later resume and `grpo runs show` see where the run plays now.
func (s *Store) SetRunConfig(ctx context.Context, name string, config json.RawMessage) error {
	err := s.updateRun(ctx, name, func(run *Run) error {
		run.Config, run.Updated = config, time.Now().UTC()
		return nil
	})
	if err != nil {
		return fmt.Errorf("store run %s's config: %w", name, runNotFound(name, err))
	}
	return nil
}

// ListRuns summarises every run, oldest first. A run's BestStep is chosen
// by its own policy, metric and EMA, and is -1 while nothing can be
// chosen. It reads the summaries ListRunsPage reads.
func (s *Store) ListRuns(ctx context.Context) ([]RunSummary, error) {
	list, _, err := s.ListRunsPage(ctx, "", 0)
	if err != nil {
		return nil, err
	}
	sortSummaries(list)
	return list, nil
}

// UniqueRunName returns prefix-1, prefix-2, ... whichever is first not in
// the store. A missing database file is an empty store. The name is free
// when read: CreateRun still fails with ErrRunExists if another process
// takes it first.
func (s *Store) UniqueRunName(ctx context.Context, prefix string) (string, error) {
	if err := ValidateRunName(prefix); err != nil {
		return "", fmt.Errorf("unique run name: %w", err)
	}
	var name string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		runs := tx.Bucket(runsBucket)
		for i := 1; ; i++ {
			name = prefix + "-" + strconv.Itoa(i)
			if runs == nil || runs.Bucket([]byte(name)) == nil {
				return nil
			}
		}
	})
	if errors.Is(err, ErrNoDatabase) {
		return prefix + "-1", nil
	}
	if err != nil {
		return "", fmt.Errorf("unique run name: %w", err)
	}
	return name, nil
}

// Snapshot returns a run's record, steps and evaluations, ordered by step,
// read in one transaction so they agree with each other.
func (s *Store) Snapshot(ctx context.Context, name string) (Run, []Step, []Evaluation, error) {
	var (
		run   Run
		steps []Step
		evals []Evaluation
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		run, steps, evals, err = snapshot(b, name)
		return err
	})
	if err != nil {
		return Run{}, nil, nil, runNotFound(name, err)
	}
	return run, steps, evals, nil
}

// Curve is Snapshot without each evaluation's Records and Transcripts:
// what selecting the best step and drawing the curve read, decoded without
// the bulk of a validation record.
func (s *Store) Curve(ctx context.Context, name string) (Run, []Step, []Evaluation, error) {
	var (
		run   Run
		steps []Step
		evals []Evaluation
	)
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		if run, err = getRun(b, name); err != nil {
			return err
		}
		if steps, err = decodeAll[Step](b.Bucket(stepsBucket), name, "step"); err != nil {
			return err
		}
		lite, err := decodeAll[evaluationHead](b.Bucket(evaluationsBucket), name, "evaluation")
		evals = make([]Evaluation, len(lite))
		for i := range lite {
			evals[i] = Evaluation(lite[i])
		}
		return err
	})
	if err != nil {
		return Run{}, nil, nil, runNotFound(name, err)
	}
	return run, steps, evals, nil
}

// Head is the evaluation without its Records and Transcripts, as Curve
// reads it: what selection and the curve need, kept in memory by a run.
func (e Evaluation) Head() Evaluation {
	e.Records, e.Transcripts = nil, nil
	return e
}

// Head is the step as selection reads it: its number, table size,
// adapter and train statistics without the per-group detail, and no job
// nor timings. A run keeps its steps' heads in memory.
func (s Step) Head() Step {
	if s.Train != nil {
		t := *s.Train
		t.Groups = nil
		s.Train = &t
	}
	s.Job, s.Seconds = nil, nil
	return s
}

// evaluationHead is Evaluation whose records and transcripts encoding/json
// skips (a conversion between the two keeps every other field).
type evaluationHead struct {
	Step         int             `json:"step"`
	Episodes     int             `json:"episodes"`
	Errored      int             `json:"errored"`
	RewardMean   float64         `json:"reward_mean"`
	RewardStd    float64         `json:"reward_std"`
	RewardCI95   [2]float64      `json:"reward_ci95"`
	DeadlockRate float64         `json:"deadlock_rate"`
	MealsMean    float64         `json:"meals_mean"`
	InvalidRate  float64         `json:"invalid_rate"`
	PerN         []EvalN         `json:"per_n"`
	Rewards      []float64       `json:"rewards"`
	Records      []EpisodeRecord `json:"-"`
	Transcripts  []EpisodeReplay `json:"-"`
}

func snapshot(b *bolt.Bucket, name string) (Run, []Step, []Evaluation, error) {
	run, err := getRun(b, name)
	if err != nil {
		return Run{}, nil, nil, err
	}
	steps, err := decodeAll[Step](b.Bucket(stepsBucket), name, "step")
	if err != nil {
		return Run{}, nil, nil, err
	}
	evals, err := decodeAll[Evaluation](b.Bucket(evaluationsBucket), name, "evaluation")
	if err != nil {
		return Run{}, nil, nil, err
	}
	return run, steps, evals, nil
}

func getRun(b *bolt.Bucket, name string) (Run, error) {
	var run Run
	v := b.Get(runKey)
	if v == nil {
		return Run{}, badRecord("run "+name, errors.New("record missing"))
	}
	if err := json.Unmarshal(v, &run); err != nil {
		return Run{}, badRecord("record of run "+name, err)
	}
	return run, nil
}

// putRun stores a run's record and its state in the run's summary, in
// the caller's transaction.
func putRun(b *bolt.Bucket, run Run) error {
	rec := newSummary(run) // of a run stored now
	if b.Get(runKey) != nil {
		var err error
		if rec, _, err = summaryOf(b, run.Name); err != nil {
			return err
		}
	}
	v, err := json.Marshal(run)
	if err != nil {
		return fmt.Errorf("encode run %s: %w", run.Name, err)
	}
	if err := b.Put(runKey, v); err != nil {
		return err
	}
	rec.Name, rec.State, rec.Created, rec.Updated = run.Name, run.State, run.Created, run.Updated
	return putSummary(b, rec)
}

// decodeAll decodes every value of bucket b in key order. A nil bucket
// holds nothing.
func decodeAll[T any](b *bolt.Bucket, run, what string) ([]T, error) {
	var out []T
	if b == nil {
		return out, nil
	}
	// The values are read in the transaction, then decoded on every core:
	// a long run's curve is thousands of JSON records.
	var keys, vals [][]byte
	b.ForEach(func(k, v []byte) error {
		keys, vals = append(keys, k), append(vals, v)
		return nil
	})
	out = make([]T, len(vals))
	errs := make([]error, len(vals))
	workers := min(runtime.GOMAXPROCS(0), len(vals)/256+1)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(vals); i += workers {
				if err := json.Unmarshal(vals[i], &out[i]); err != nil {
					errs[i] = badRecord(fmt.Sprintf("%s %d of run %s", what, btoi(keys[i]), run), err)
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func validState(state string) error {
	if !slices.Contains(States, state) {
		return fmt.Errorf("unknown run state %q (accepted: %s)", state, strings.Join(States, ", "))
	}
	return nil
}

// NewRunID returns a random run id: 16 hex digits (64 bits) from
// crypto/rand, so two stores never draw the same one.
func NewRunID() string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}
