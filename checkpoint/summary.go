package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// summaryKey is a run's summary: what ListRuns and ListRunsPage read, so
// that listing runs never decodes their steps. It is written in the same
// transaction as every step, evaluation and state it sums up.
var summaryKey = []byte("summary")

// summaryRecord is the stored summary: the RunSummary and the state of
// selection by the run's policy, advanced one committed step at a time
// with Select's arithmetic (steps and their evaluations are committed in
// step order, so the incremental result is Select's).
type summaryRecord struct {
	RunSummary
	// Committed is whether a step is: Steps alone cannot tell step 0 from
	// none.
	Committed bool `json:"committed"`
	// Smoothed is the last (EMA-smoothed) score of a best-* policy;
	// Scores how many scores it has smoothed.
	Smoothed float64 `json:"smoothed"`
	Scores   int     `json:"scores"`
}

// ListRunsPage lists at most limit runs' summaries in name order, from
// the first name after after ("" for the first page); next is the name to
// pass as after for the next page, "" when there is none. limit <= 0
// means all. Each summary is read from its stored record, kept up to date
// at every commit; a run stored before summaries existed has its summary
// built once from its steps and stored.
func (s *Store) ListRunsPage(ctx context.Context, after string, limit int) (list []RunSummary, next string, err error) {
	var missing []string
	err = s.view(ctx, func(tx *bolt.Tx) error {
		runs := tx.Bucket(runsBucket)
		if runs == nil {
			return nil
		}
		c := runs.Cursor()
		k, v := c.First()
		if after != "" {
			k, v = c.Seek([]byte(after))
			if k != nil && bytes.Equal(k, []byte(after)) {
				k, v = c.Next()
			}
		}
		for ; k != nil; k, v = c.Next() {
			if v != nil {
				continue // not a run's bucket (Check reports it)
			}
			if limit > 0 && len(list) == limit {
				next = list[len(list)-1].Name
				return nil
			}
			name := string(k)
			rec, stored, err := summaryOf(runs.Bucket(k), name)
			if err != nil {
				return err
			}
			if !stored {
				missing = append(missing, name)
			}
			list = append(list, rec.RunSummary)
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list runs: %w", err)
	}
	if len(missing) > 0 {
		// Store what was built, so that it is built once. A store this
		// process cannot write (read-only file) is listed all the same.
		_ = s.update(ctx, func(tx *bolt.Tx) error {
			for _, name := range missing {
				b, err := runBucket(tx, name)
				if err != nil {
					continue // deleted meanwhile
				}
				rec, stored, err := summaryOf(b, name)
				if err != nil || stored {
					continue
				}
				if err := putSummary(b, rec); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return list, next, nil
}

// summaryOf reads run name's summary from its bucket b, or builds it from
// the run's record, steps and evaluations when none is stored (stored
// false).
func summaryOf(b *bolt.Bucket, name string) (rec summaryRecord, stored bool, err error) {
	if v := b.Get(summaryKey); v != nil {
		if err := json.Unmarshal(v, &rec); err != nil {
			return summaryRecord{}, false, badRecord("summary of run "+name, err)
		}
		return rec, true, nil
	}
	run, err := getRun(b, name)
	if err != nil {
		return summaryRecord{}, false, err
	}
	steps, err := decodeAll[Step](b.Bucket(stepsBucket), name, "step")
	if err != nil {
		return summaryRecord{}, false, err
	}
	heads, err := decodeAll[evaluationHead](b.Bucket(evaluationsBucket), name, "evaluation")
	if err != nil {
		return summaryRecord{}, false, err
	}
	evals := make(map[int]*Evaluation, len(heads))
	for i := range heads {
		ev := Evaluation(heads[i])
		evals[ev.Step] = &ev
	}
	rec = newSummary(run)
	for _, st := range steps {
		rec.advance(run, st, evals[st.Step], func(step int) *Evaluation { return evals[step] })
	}
	return rec, false, nil
}

// newSummary is the summary of run with no step committed.
func newSummary(run Run) summaryRecord {
	return summaryRecord{RunSummary: RunSummary{Name: run.Name, State: run.State, BestStep: -1, Metric: selectionMetric(run.Metric), Created: run.Created, Updated: run.Updated}}
}

func selectionMetric(m Metric) Metric {
	if m == "" {
		return MetricNames[0]
	}
	return m
}

// advance sums up step st, committed with its evaluation ev (nil when it
// was not validated), after every earlier step: the best step by run's
// policy, as Select would choose it from all the steps so far. evalOf
// reads an earlier step's evaluation (nil when there is none), for the
// best-train policy, which scores a step by the next step's train stats.
func (r *summaryRecord) advance(run Run, st Step, ev *Evaluation, evalOf func(step int) *Evaluation) {
	r.Steps, r.Committed = st.Step, true
	if ValidateSelection(run.Policy, run.Metric, run.EMA) != nil {
		return // Select would fail: no best step
	}
	m := metrics[selectionMetric(run.Metric)]
	deadlock := func(ev *Evaluation) *float64 {
		if ev == nil {
			return nil
		}
		return &ev.DeadlockRate
	}
	// offer smooths a score of step and keeps it when it is the best:
	// strictly better, so ties go to the earlier step.
	offer := func(step int, v float64, ev *Evaluation) {
		if math.IsNaN(v) {
			return
		}
		if r.Scores > 0 {
			v = run.EMA*r.Smoothed + (1-run.EMA)*v
		}
		r.Smoothed = v
		r.Scores++
		if r.Scores == 1 || (m.minimize && v < *r.BestValue) || (!m.minimize && v > *r.BestValue) {
			r.BestStep, r.BestValue, r.BestDeadlockRate = step, &v, deadlock(ev)
		}
	}
	switch run.Policy {
	case PolicyLast:
		r.BestStep, r.BestValue, r.BestDeadlockRate = st.Step, nil, deadlock(ev)
		if ev != nil {
			if v := m.eval(ev); !math.IsNaN(v) {
				r.BestValue = &v
			}
		}
	case PolicyBestTrain:
		if st.Step >= 1 && st.Train != nil {
			offer(st.Step-1, m.train(st.Train), evalOf(st.Step-1))
		}
	default: // best-validation
		if ev != nil {
			offer(st.Step, m.eval(ev), ev)
		}
	}
}

// putSummary stores a run's summary.
func putSummary(b *bolt.Bucket, rec summaryRecord) error {
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode summary of run %s: %w", rec.Name, err)
	}
	return b.Put(summaryKey, v)
}

// getEvaluationHead decodes the evaluation of one step without its
// records; nil when the step has none.
func getEvaluationHead(b *bolt.Bucket, name string, step int) (*Evaluation, error) {
	evals := b.Bucket(evaluationsBucket)
	if evals == nil {
		return nil, nil
	}
	v := evals.Get(itob(step))
	if v == nil {
		return nil, nil
	}
	var h evaluationHead
	if err := json.Unmarshal(v, &h); err != nil {
		return nil, badRecord(fmt.Sprintf("evaluation %d of run %s", step, name), err)
	}
	ev := Evaluation(h)
	return &ev, nil
}

// sortSummaries orders summaries oldest first, as ListRuns lists them.
func sortSummaries(list []RunSummary) {
	slices.SortStableFunc(list, func(a, b RunSummary) int { return a.Created.Compare(b.Created) })
}
