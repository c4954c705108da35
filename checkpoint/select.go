package checkpoint

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Policy is a selection policy: which step a run keeps (config key
// validation.selection).
type Policy string

// Selection policies.
const (
	// PolicyBestValidation keeps the evaluated step with the best
	// validation metric, optionally EMA-smoothed; ties go to the earlier step.
	PolicyBestValidation Policy = "best-validation"
	// PolicyBestTrain keeps the step whose checkpoint sampled the best
	// training rollouts. Step k's checkpoint is scored by the train stats
	// recorded at step k+1, whose rollouts are sampled with adapter k before
	// step k+1's update (this assumes synchronous training,
	// grpo.max_off_policy_steps 0). The last step has no score. Under a
	// curriculum the table size changes between steps, so scores across a
	// change are not comparable: prefer best-validation.
	PolicyBestTrain Policy = "best-train"
	// PolicyLast keeps the last committed step.
	PolicyLast Policy = "last"
)

// Policies lists the accepted selection policies; the first is the default.
var Policies = []Policy{PolicyBestValidation, PolicyBestTrain, PolicyLast}

// ParsePolicy accepts the names in Policies.
func ParsePolicy(s string) (Policy, error) {
	if p := Policy(s); slices.Contains(Policies, p) {
		return p, nil
	}
	return "", fmt.Errorf("%q is not accepted; accepted: %s", s, joinNames(Policies))
}

// Metric is a selection metric (config key validation.metric).
type Metric string

// Selection metrics.
const (
	MetricRewardMean   Metric = "reward_mean"   // maximised
	MetricMealsMean    Metric = "meals_mean"    // maximised
	MetricDeadlockRate Metric = "deadlock_rate" // minimised
)

// MetricNames lists the accepted selection metrics; the first is the default.
var MetricNames = []Metric{MetricRewardMean, MetricMealsMean, MetricDeadlockRate}

// ParseMetric accepts the names in MetricNames.
func ParseMetric(s string) (Metric, error) {
	if m := Metric(s); slices.Contains(MetricNames, m) {
		return m, nil
	}
	return "", fmt.Errorf("%q is not accepted; accepted: %s", s, joinNames(MetricNames))
}

// Minimized reports whether smaller values of m are better.
func (m Metric) Minimized() bool { return metrics[m].minimize }

// Of reads m from an evaluation; NaN for an unknown metric.
func (m Metric) Of(e Evaluation) float64 {
	if x, ok := metrics[m]; ok {
		return x.eval(&e)
	}
	return math.NaN()
}

// joinNames lists accepted names for an error message.
func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// metric reads one selection metric from validation or train stats.
type metric struct {
	minimize bool
	eval     func(*Evaluation) float64
	train    func(*TrainStats) float64
}

var metrics = map[Metric]metric{
	MetricRewardMean: {
		eval:  func(e *Evaluation) float64 { return e.RewardMean },
		train: func(t *TrainStats) float64 { return t.RewardMean },
	},
	MetricMealsMean: {
		eval:  func(e *Evaluation) float64 { return e.MealsMean },
		train: func(t *TrainStats) float64 { return t.MealsMean },
	},
	MetricDeadlockRate: {
		minimize: true,
		eval:     func(e *Evaluation) float64 { return e.DeadlockRate },
		train:    func(t *TrainStats) float64 { return t.DeadlockRate },
	},
}

// ErrNoSelection is returned by Select when no step can be chosen yet.
var ErrNoSelection = errors.New("no step to select")

// Selection is the step a policy keeps. Its JSON field names are a public
// interface (`grpo best --json`, GET /api/v1/runs/{id}/best).
type Selection struct {
	Policy Policy `json:"policy"`
	Step   int    `json:"step"`
	// Value is the chosen step's score: the (smoothed) metric for the best-*
	// policies, the raw validation metric for last.
	Value float64 `json:"value"`
	// Scored is false when Value means nothing: policy last on a step that
	// was not evaluated.
	Scored bool `json:"scored"`
	// LastStep is the last committed step, -1 if none.
	LastStep int `json:"last_step"`
	// LastValue is the same score at the last scored step: the last
	// evaluated step, or for best-train the step before the last.
	LastValue float64 `json:"last_value"`
	// Adapter is the chosen step's adapter, nil for the base model.
	Adapter *Adapter `json:"adapter"`
}

// ValidateSelection checks a policy, metric and EMA factor as Select would.
// An empty policy or metric means the default.
func ValidateSelection(policy Policy, metricName Metric, ema float64) error {
	if _, err := ParsePolicy(string(policy)); policy != "" && err != nil {
		return fmt.Errorf("selection policy %w", err)
	}
	if _, err := ParseMetric(string(metricName)); metricName != "" && err != nil {
		return fmt.Errorf("selection metric %w", err)
	}
	if !(ema >= 0 && ema < 1) {
		return fmt.Errorf("selection ema %v out of range (accepted: 0 <= ema < 1, 0 = no smoothing)", ema)
	}
	return nil
}

// Select applies a selection policy to a run's steps and evaluations. An
// empty policy means best-validation and an empty metric reward_mean. The
// best-* policies smooth the sequence of scored steps in step order,
// s_1 = v_1, s_k = ema*s_{k-1} + (1-ema)*v_k, before taking the best
// (ema 0 = none); last ignores ema. It returns an error matching
// ErrNoSelection when the policy has nothing to choose from.
func Select(policy Policy, metricName Metric, ema float64, steps []Step, evals []Evaluation) (Selection, error) {
	if err := ValidateSelection(policy, metricName, ema); err != nil {
		return Selection{}, err
	}
	if policy == "" {
		policy = Policies[0]
	}
	if metricName == "" {
		metricName = MetricNames[0]
	}
	m := metrics[metricName]

	sel := Selection{Policy: policy, LastStep: -1}
	for i := range steps {
		sel.LastStep = max(sel.LastStep, steps[i].Step)
	}
	val := validationScores(m, evals)

	switch policy {
	case PolicyLast:
		if sel.LastStep < 0 {
			return Selection{}, fmt.Errorf("select %s: %w: no committed steps", policy, ErrNoSelection)
		}
		sel.Step = sel.LastStep
		if len(val) > 0 {
			last := val[len(val)-1]
			sel.LastValue = last.value
			if last.step == sel.Step {
				sel.Value, sel.Scored = last.value, true
			}
		}
	default:
		scores, what := val, "no evaluated steps"
		if policy == PolicyBestTrain {
			scores, what = trainScores(m, steps), "no step has train stats from the step after it"
		}
		if len(scores) == 0 {
			return Selection{}, fmt.Errorf("select %s: %w: %s", policy, ErrNoSelection, what)
		}
		scores = smooth(scores, ema)
		best := scores[0]
		for _, s := range scores[1:] {
			if (m.minimize && s.value < best.value) || (!m.minimize && s.value > best.value) {
				best = s
			}
		}
		sel.Step, sel.Value, sel.Scored = best.step, best.value, true
		sel.LastValue = scores[len(scores)-1].value
	}
	for i := range steps {
		if steps[i].Step == sel.Step {
			sel.Adapter = steps[i].Adapter
		}
	}
	return sel, nil
}

// score is a step's selection score.
type score struct {
	step  int
	value float64
}

// validationScores scores evaluated steps in step order, skipping values
// that cannot be compared.
func validationScores(m metric, evals []Evaluation) []score {
	out := make([]score, 0, len(evals))
	for i := range evals {
		if v := m.eval(&evals[i]); !math.IsNaN(v) {
			out = append(out, score{evals[i].Step, v})
		}
	}
	return sortScores(out)
}

// trainScores scores step k by the train stats recorded at step k+1.
func trainScores(m metric, steps []Step) []score {
	out := make([]score, 0, len(steps))
	for i := range steps {
		s := &steps[i]
		if s.Step < 1 || s.Train == nil {
			continue
		}
		if v := m.train(s.Train); !math.IsNaN(v) {
			out = append(out, score{s.Step - 1, v})
		}
	}
	return sortScores(out)
}

func sortScores(s []score) []score {
	byStep := func(a, b score) int { return cmp.Compare(a.step, b.step) }
	if !slices.IsSortedFunc(s, byStep) { // a store's are, in step order
		slices.SortStableFunc(s, byStep)
	}
	return s
}

// smooth returns the exponential moving average of scores in step order.
func smooth(scores []score, ema float64) []score {
	if ema == 0 {
		return scores
	}
	out := make([]score, len(scores))
	for i, s := range scores {
		if i > 0 {
			s.value = ema*out[i-1].value + (1-ema)*s.value
		}
		out[i] = s
	}
	return out
}
