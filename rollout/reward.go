package rollout

import (
	"fmt"
	"slices"
	"strings"
)

// RewardFunc names a reward function (DESIGN §3).
type RewardFunc string

// Reward functions.
const (
	// Paper is the study's reward. Invalid outputs are not actions, so a
	// policy that never emits a parseable tool call scores exactly 1.0.
	Paper RewardFunc = "paper"
	// Shaped removes that degenerate maximum: the no-deadlock term needs at
	// least one meal, and invalid outputs count as idle actions.
	Shaped RewardFunc = "shaped"
)

// RewardFuncs lists the accepted reward functions; the first is the default.
var RewardFuncs = []RewardFunc{Shaped, Paper}

// Weights of the four reward terms.
type Weights struct {
	Alpha float64 `json:"alpha" yaml:"alpha"`
	Beta  float64 `json:"beta" yaml:"beta"`
	Gamma float64 `json:"gamma" yaml:"gamma"`
	Delta float64 `json:"delta" yaml:"delta"`
}

// DefaultWeights are alpha 1.0, beta 0.5, gamma 0.3, delta 0.1.
func DefaultWeights() Weights { return Weights{Alpha: 1.0, Beta: 0.5, Gamma: 0.3, Delta: 0.1} }

// RewardConfig selects the reward function and its weights.
type RewardConfig struct {
	Function RewardFunc `json:"function"`
	Weights  Weights    `json:"weights"`
}

// DefaultRewardConfig is the shaped reward with the default weights.
func DefaultRewardConfig() RewardConfig {
	return RewardConfig{Function: Shaped, Weights: DefaultWeights()}
}

// ParseRewardFunc accepts the names in RewardFuncs.
func ParseRewardFunc(s string) (RewardFunc, error) {
	if f := RewardFunc(s); slices.Contains(RewardFuncs, f) {
		return f, nil
	}
	return "", fmt.Errorf("reward function %q: accepted: %s", s, joinNames(RewardFuncs))
}

// joinNames lists accepted names for an error message.
func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// Terms are the four reward components, each in [0, 1].
type Terms struct {
	NoDeadlock float64 `json:"r_nd"`
	Throughput float64 `json:"r_thru"`
	Unfairness float64 `json:"r_fair"`
	Idle       float64 `json:"r_idle"`
}

// Metrics describe one episode (DESIGN §3).
type Metrics struct {
	N             int            `json:"n"`
	Rounds        int            `json:"rounds"`
	Meals         []int          `json:"meals"`
	TotalMeals    int            `json:"total_meals"`
	MaxMeals      int            `json:"max_meals"`
	Deadlocked    bool           `json:"deadlocked"`
	DeadlockRound int            `json:"deadlock_round"` // 0 when not deadlocked
	RoundsPlayed  int            `json:"rounds_played"`
	Actions       map[string]int `json:"actions"` // valid tool calls by tool
	Failed        int            `json:"failed_actions"`
	Invalid       int            `json:"invalid_outputs"`
	Truncated     int            `json:"truncated_outputs,omitempty"` // turns cut at the token limit; also counted in Invalid
	Oversized     int            `json:"oversized_outputs,omitempty"` // answers over Runner.MaxAnswerBytes, dropped from the conversation; also counted in Invalid
	Starved       int            `json:"starved"`                     // philosophers with 0 meals
	Jain          float64        `json:"jain"`                        // Jain's fairness of meals; 0 when nobody ate
	LLMCalls      int            `json:"llm_calls"`
	PromptTokens  int            `json:"prompt_tokens"`
	OutputTokens  int            `json:"completion_tokens"`
	Errors        int            `json:"errors"`
}

// fill derives the totals from Meals.
func (m *Metrics) fill() {
	m.TotalMeals, m.Starved = 0, 0
	sumSq := 0
	for _, x := range m.Meals {
		m.TotalMeals += x
		sumSq += x * x
		if x == 0 {
			m.Starved++
		}
	}
	m.Jain = 0
	if sumSq > 0 {
		t := float64(m.TotalMeals)
		m.Jain = t * t / (float64(len(m.Meals)) * float64(sumSq))
	}
}

// ValidActions is the number of parseable tool calls.
func (m *Metrics) ValidActions() int {
	a := 0
	for _, c := range m.Actions {
		a += c
	}
	return a
}

// Score computes the reward of an episode and its terms.
func Score(cfg RewardConfig, m Metrics) (float64, Terms) {
	var t Terms
	M := float64(m.TotalMeals)
	n := float64(len(m.Meals))

	if !m.Deadlocked && (cfg.Function == Paper || m.TotalMeals >= 1) {
		t.NoDeadlock = 1
	}
	if m.MaxMeals > 0 {
		t.Throughput = min(1, max(0, M/float64(m.MaxMeals)))
	}
	if m.TotalMeals > 0 && n > 1 {
		mean := M / n
		v := 0.0
		for _, x := range m.Meals {
			d := float64(x) - mean
			v += d * d
		}
		v /= n
		t.Unfairness = min(1, v/(M*M*(n-1)/(n*n)))
	}
	A, T := m.ValidActions(), m.Actions[Think]
	if cfg.Function == Shaped {
		A += m.Invalid
		T += m.Invalid
	}
	if A > 0 {
		t.Idle = float64(T) / float64(A)
	}
	w := cfg.Weights
	r := w.Alpha*t.NoDeadlock + w.Beta*t.Throughput - w.Gamma*t.Unfairness - w.Delta*t.Idle
	return r, t
}
