package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

// steps returns steps 0..n-1; step k > 0 has adapter ak, and train stats
// with reward mean train[k] when train is long enough.
func steps(n int, train ...float64) []Step {
	out := make([]Step, n)
	for k := range out {
		out[k].Step = k
		if k > 0 {
			out[k].Adapter = &Adapter{Name: fmt.Sprintf("a%d", k), Path: fmt.Sprintf("/a/%d", k)}
		}
		if k > 0 && k < len(train) {
			out[k].Train = &TrainStats{RewardMean: train[k]}
		}
	}
	return out
}

// evals returns evaluations of steps 0, every, 2*every, ... with the given
// reward means.
func evals(every int, rewards ...float64) []Evaluation {
	out := make([]Evaluation, len(rewards))
	for i, r := range rewards {
		out[i] = Evaluation{Step: i * every, RewardMean: r}
	}
	return out
}

func adapter(k int) *Adapter {
	return &Adapter{Name: fmt.Sprintf("a%d", k), Path: fmt.Sprintf("/a/%d", k)}
}

func TestSelect(t *testing.T) {
	deadlocks := evals(1, 0, 0, 0, 0)
	for i, d := range []float64{0.4, 0.1, 0.1, 0.2} {
		deadlocks[i].DeadlockRate = d
	}
	meals := evals(1, 0, 0, 0)
	for i, m := range []float64{1, 3, 2} {
		meals[i].MealsMean = m
	}

	for _, tt := range []struct {
		name   string
		policy Policy
		metric Metric
		ema    float64
		steps  []Step
		evals  []Evaluation
		want   Selection
	}{
		{
			name: "ties go to the earlier step", policy: PolicyBestValidation, metric: MetricRewardMean,
			steps: steps(4), evals: evals(1, 0.5, 0.7, 0.7, 0.3),
			want: Selection{Policy: PolicyBestValidation, Step: 1, Value: 0.7, Scored: true, LastStep: 3, LastValue: 0.3, Adapter: adapter(1)},
		},
		{
			name: "base model wins", policy: PolicyBestValidation, metric: MetricRewardMean,
			steps: steps(3), evals: evals(1, 0.6, 0.2, 0.1),
			want: Selection{Policy: PolicyBestValidation, Step: 0, Value: 0.6, Scored: true, LastStep: 2, LastValue: 0.1},
		},
		{
			name: "defaults", policy: "", metric: "",
			steps: steps(3), evals: evals(1, 0.1, 0.3, 0.2),
			want: Selection{Policy: PolicyBestValidation, Step: 1, Value: 0.3, Scored: true, LastStep: 2, LastValue: 0.2, Adapter: adapter(1)},
		},
		{
			name: "no smoothing picks the spike", policy: PolicyBestValidation, metric: MetricRewardMean,
			steps: steps(5), evals: evals(1, 0.1, 0.9, 0.2, 0.6, 0.6),
			want: Selection{Policy: PolicyBestValidation, Step: 1, Value: 0.9, Scored: true, LastStep: 4, LastValue: 0.6, Adapter: adapter(1)},
		},
		{
			// s = 0.1, 0.5, 0.35, 0.475, 0.5375
			name: "ema smooths the spike away", policy: PolicyBestValidation, metric: MetricRewardMean, ema: 0.5,
			steps: steps(5), evals: evals(1, 0.1, 0.9, 0.2, 0.6, 0.6),
			want: Selection{Policy: PolicyBestValidation, Step: 4, Value: 0.5375, Scored: true, LastStep: 4, LastValue: 0.5375, Adapter: adapter(4)},
		},
		{
			// evaluated steps 0, 2, 4: s = 0.2, 0.5, 0.45
			name: "ema runs over evaluated steps only", policy: PolicyBestValidation, metric: MetricRewardMean, ema: 0.5,
			steps: steps(6), evals: evals(2, 0.2, 0.8, 0.4),
			want: Selection{Policy: PolicyBestValidation, Step: 2, Value: 0.5, Scored: true, LastStep: 5, LastValue: 0.45, Adapter: adapter(2)},
		},
		{
			name: "deadlock rate is minimised", policy: PolicyBestValidation, metric: MetricDeadlockRate,
			steps: steps(4), evals: deadlocks,
			want: Selection{Policy: PolicyBestValidation, Step: 1, Value: 0.1, Scored: true, LastStep: 3, LastValue: 0.2, Adapter: adapter(1)},
		},
		{
			name: "meals are maximised", policy: PolicyBestValidation, metric: MetricMealsMean,
			steps: steps(3), evals: meals,
			want: Selection{Policy: PolicyBestValidation, Step: 1, Value: 3, Scored: true, LastStep: 2, LastValue: 2, Adapter: adapter(1)},
		},
		{
			// step k scored by train[k+1]: 0.2, 0.9, 0.5, 0.7; step 4 unscored
			name: "best-train scores step k by the rollouts of k+1", policy: PolicyBestTrain, metric: MetricRewardMean,
			steps: steps(5, 0, 0.2, 0.9, 0.5, 0.7), evals: evals(1, 0.9, 0.1, 0.1, 0.1, 0.1),
			want: Selection{Policy: PolicyBestTrain, Step: 1, Value: 0.9, Scored: true, LastStep: 4, LastValue: 0.7, Adapter: adapter(1)},
		},
		{
			// s = 0.2, 0.55, 0.525, 0.6125
			name: "best-train with ema", policy: PolicyBestTrain, metric: MetricRewardMean, ema: 0.5,
			steps: steps(5, 0, 0.2, 0.9, 0.5, 0.7),
			want:  Selection{Policy: PolicyBestTrain, Step: 3, Value: 0.6125, Scored: true, LastStep: 4, LastValue: 0.6125, Adapter: adapter(3)},
		},
		{
			name: "last, evaluated", policy: PolicyLast, metric: MetricRewardMean, ema: 0.5,
			steps: steps(3), evals: evals(1, 0.5, 0.9, 0.3),
			want: Selection{Policy: PolicyLast, Step: 2, Value: 0.3, Scored: true, LastStep: 2, LastValue: 0.3, Adapter: adapter(2)},
		},
		{
			name: "last, not evaluated", policy: PolicyLast, metric: MetricRewardMean,
			steps: steps(4), evals: evals(2, 0.5, 0.8),
			want: Selection{Policy: PolicyLast, Step: 3, Scored: false, LastStep: 3, LastValue: 0.8, Adapter: adapter(3)},
		},
		{
			name: "last, base model only", policy: PolicyLast, metric: MetricRewardMean,
			steps: steps(1),
			want:  Selection{Policy: PolicyLast, Step: 0, LastStep: 0},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(tt.policy, tt.metric, tt.ema, tt.steps, tt.evals)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got.Value-tt.want.Value) > 1e-12 || math.Abs(got.LastValue-tt.want.LastValue) > 1e-12 {
				t.Fatalf("Select() value %v last value %v, want %v and %v", got.Value, got.LastValue, tt.want.Value, tt.want.LastValue)
			}
			got.Value, got.LastValue = tt.want.Value, tt.want.LastValue
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Select()=%+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestSelect_Errors(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy Policy
		metric Metric
		ema    float64
		steps  []Step
		evals  []Evaluation
		is     error
		says   []string
	}{
		{name: "nothing at all", policy: PolicyBestValidation, metric: MetricRewardMean, is: ErrNoSelection},
		{name: "no evaluations", policy: PolicyBestValidation, metric: MetricRewardMean, steps: steps(3), is: ErrNoSelection},
		{name: "best-train on the base model", policy: PolicyBestTrain, metric: MetricRewardMean, steps: steps(1), evals: evals(1, 0.5), is: ErrNoSelection},
		{name: "last with no steps", policy: PolicyLast, metric: MetricRewardMean, evals: evals(1, 0.5), is: ErrNoSelection},
		{name: "unknown policy", policy: "best", metric: MetricRewardMean, steps: steps(1), evals: evals(1, 0.5),
			says: []string{`"best"`, "best-validation, best-train, last"}},
		{name: "unknown metric", policy: PolicyLast, metric: "reward", steps: steps(1), evals: evals(1, 0.5),
			says: []string{`"reward"`, "reward_mean, meals_mean, deadlock_rate"}},
		{name: "ema 1", policy: PolicyBestValidation, ema: 1, steps: steps(1), evals: evals(1, 0.5), says: []string{"ema 1", "0 <= ema < 1"}},
		{name: "negative ema", policy: PolicyBestValidation, ema: -0.1, steps: steps(1), evals: evals(1, 0.5), says: []string{"ema -0.1"}},
		{name: "NaN ema", policy: PolicyBestValidation, ema: math.NaN(), steps: steps(1), evals: evals(1, 0.5), says: []string{"ema NaN"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Select(tt.policy, tt.metric, tt.ema, tt.steps, tt.evals)
			if err == nil {
				t.Fatal("Select()=nil error, want one")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("Select()=%v, want %v", err, tt.is)
			}
			for _, s := range tt.says {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("Select()=%q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestSelection_JSON(t *testing.T) {
	b, err := json.Marshal(Selection{Policy: PolicyBestValidation, Step: 1, Value: 0.75, Scored: true, LastStep: 3, LastValue: 0.25, Adapter: adapter(1)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"policy":"best-validation","step":1,"value":0.75,"scored":true,"last_step":3,"last_value":0.25,"adapter":{"name":"a1","path":"/a/1"}}`
	if got := string(b); got != want {
		t.Fatalf("JSON=%s, want %s", got, want)
	}
}
