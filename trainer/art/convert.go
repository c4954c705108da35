package art

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/grpo-dev/grpo/grpo"
	"github.com/grpo-dev/grpo/trainer"
)

// TrajectoryGroup is ART's TrajectoryGroup: the trajectories over which ART
// computes group statistics.
type TrajectoryGroup struct {
	Trajectories []Trajectory     `json:"trajectories"`
	Exceptions   []map[string]any `json:"exceptions"` // always empty: failed episodes are not sent
}

// Trajectory is ART's Trajectory. MessagesAndChoices holds grpo's items
// unchanged: OpenAI messages, and each sampled turn as the choice object
// the inference server returned (ART parses those as openai Choice objects
// and reads logprobs.content[].token in vLLM's "token_id:<n>" form).
type Trajectory struct {
	MessagesAndChoices []json.RawMessage `json:"messages_and_choices"`
	Tools              json.RawMessage   `json:"tools,omitempty"`
	// AdditionalHistories holds, for training, one history per earlier
	// sampled turn (see splitTurns); ART tokenizes each like the main one.
	AdditionalHistories []History          `json:"additional_histories,omitempty"`
	Reward              float64            `json:"reward"`
	Metrics             map[string]float64 `json:"metrics"`
	Metadata            map[string]any     `json:"metadata"`
}

// History is ART's History: another conversation of the same trajectory.
type History struct {
	MessagesAndChoices []json.RawMessage `json:"messages_and_choices"`
	Tools              json.RawMessage   `json:"tools,omitempty"`
}

// Metadata and metric keys that carry grpo's identifiers and values into
// ART's logs.
const (
	MetaGroup       = "grpo_group"
	MetaEpisode     = "grpo_episode"
	MetaAgent       = "grpo_agent"
	MetricReward    = "grpo_reward"
	MetricAdvantage = "grpo_advantage"
)

// TrainGroups turns a step's trajectories into ART trajectory groups for
// /_train_model on a server of protocol p: one ART group per grpo group, in
// order of first appearance, with each trajectory's advantage sent as ART's
// reward (ART recomputes advantages from rewards; see the package doc) and
// its episode reward kept as the metric grpo_reward.
//
// Up to 0.4.7 each earlier sampled turn goes in a history of its own (see
// splitTurns); from 0.4.8, which also trains plain assistant messages, a
// trajectory is one history and ART renders its earlier turns as the chat
// template renders history (MultiTurn reports those trajectories).
//
// Each group's advantages are first made to sum to exactly 0 (see centre),
// so that ART's subtraction of their mean changes nothing and the
// zero-advantage trajectories stay exactly 0, which ART skips. On servers
// with scale_rewards (0.4.4 on) they are then left out, since ART would
// skip them anyway; before, they are sent, as ART's group standard
// deviation counts them. trajs must therefore hold every scored trajectory
// of each group. Every sampled choice must carry logprobs (ART refuses
// choices without them).
func TrainGroups(trajs []trainer.Trajectory, p Protocol) ([]TrajectoryGroup, error) {
	out, err := groups(trajs, !p.TrainsMessages, true)
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, g := range out {
		adv := make([]float64, len(g.Trajectories))
		for i, t := range g.Trajectories {
			adv[i] = t.Reward
		}
		centre(adv)
		ts := g.Trajectories[:0]
		for i, t := range g.Trajectories {
			t.Reward = adv[i]
			if t.Reward == 0 && p.ScaleRewards {
				continue
			}
			ts = append(ts, t)
		}
		if len(ts) > 0 {
			g.Trajectories = ts
			kept = append(kept, g)
		}
	}
	return kept, nil
}

// centre rounds advantages to a common binary quantum and moves the one
// of largest magnitude by the rounding left over, so that they sum to
// exactly 0 in any order and any summation Python uses (plain or
// compensated). ART computes reward - mean(rewards): with grpo's
// advantages as sent, the float mean came out about 1e-17, which turned
// exact zeros into 7e-17 that ART then trained on (and from 0.4.4 counted
// in its mean |advantage|). The quantum is 2^-52 of the sum of magnitudes,
// so every partial sum is exact and the change is rounding-sized; values
// below half a quantum (grpo's own rounding of r - mean) become 0. A sum
// of more than one quantum per value is not rounding: it is left for
// checkAdvantages to refuse.
func centre(adv []float64) {
	var total float64
	for _, a := range adv {
		total += math.Abs(a)
	}
	if total == 0 || math.IsInf(total, 0) || math.IsNaN(total) {
		return
	}
	_, exp := math.Frexp(total)
	q := math.Ldexp(1, exp-52)
	k := make([]int64, len(adv))
	var sum int64
	big := 0
	for i, a := range adv {
		k[i] = int64(math.Round(a / q))
		sum += k[i]
		if math.Abs(a) > math.Abs(adv[big]) {
			big = i
		}
	}
	if sum > int64(len(adv)) || -sum > int64(len(adv)) {
		return // not rounding: Train refuses advantages that do not average 0
	}
	k[big] -= sum
	for i := range adv {
		adv[i] = float64(k[i]) * q
	}
}

// LogGroups turns validation trajectories into ART trajectory groups for
// /_log, with the episode reward as ART's reward (ART logs its mean as
// val/reward). Choices need no logprobs there.
func LogGroups(trajs []trainer.Trajectory) ([]TrajectoryGroup, error) {
	return groups(trajs, false, false)
}

func groups(trajs []trainer.Trajectory, split, forTraining bool) ([]TrajectoryGroup, error) {
	index := map[string]int{}
	var out []TrajectoryGroup
	for _, t := range trajs {
		if err := checkChoices(t, forTraining); err != nil {
			return nil, err
		}
		gi, ok := index[t.Group]
		if !ok {
			gi = len(out)
			index[t.Group] = gi
			out = append(out, TrajectoryGroup{Exceptions: []map[string]any{}})
		}
		reward := t.Reward
		if forTraining {
			reward = t.Advantage
		}
		items, histories := t.MessagesAndChoices, []History(nil)
		if split {
			var err error
			if items, histories, err = splitTurns(t.MessagesAndChoices, t.Tools); err != nil {
				return nil, fmt.Errorf("group %s episode %s agent %d: %w", t.Group, t.Episode, t.Agent, err)
			}
		}
		out[gi].Trajectories = append(out[gi].Trajectories, Trajectory{
			MessagesAndChoices:  items,
			Tools:               t.Tools,
			AdditionalHistories: histories,
			Reward:              reward,
			Metrics:             map[string]float64{MetricReward: t.Reward, MetricAdvantage: t.Advantage},
			Metadata:            map[string]any{MetaGroup: t.Group, MetaEpisode: t.Episode, MetaAgent: t.Agent},
		})
	}
	return out, nil
}

// splitTurns makes each sampled turn the last of a conversation of its
// own. ART renders each history once through the chat template and trains
// every choice in it; a template such as Qwen3's renders earlier assistant
// turns differently from the last (it drops their <think> block), so a
// turn trained as an earlier one would be trained in a context it was not
// sampled in. The main history keeps the last sampled turn as a choice and
// every earlier one as the plain assistant message it became in the next
// request; each earlier turn k gets a history of the items up to it, with
// only turn k a choice. Each turn is then trained once, as the last
// assistant turn, as vLLM rendered it for sampling.
func splitTurns(items []json.RawMessage, tools json.RawMessage) ([]json.RawMessage, []History, error) {
	var turns []int
	for i, raw := range items {
		if isChoice(raw) {
			turns = append(turns, i)
		}
	}
	if len(turns) < 2 {
		return items, nil, nil
	}
	asMessages := func(upTo, keep int) ([]json.RawMessage, error) {
		out := make([]json.RawMessage, upTo)
		for i := range upTo {
			out[i] = items[i]
			if i != keep && isChoice(items[i]) {
				m, err := choiceMessage(items[i])
				if err != nil {
					return nil, fmt.Errorf("item %d: %w", i, err)
				}
				out[i] = m
			}
		}
		return out, nil
	}
	last := turns[len(turns)-1]
	main, err := asMessages(len(items), last)
	if err != nil {
		return nil, nil, err
	}
	var hs []History
	for _, k := range turns[:len(turns)-1] {
		h, err := asMessages(k+1, k)
		if err != nil {
			return nil, nil, err
		}
		hs = append(hs, History{MessagesAndChoices: h, Tools: tools})
	}
	return main, hs, nil
}

// MultiTurn counts the trajectories with more than one sampled turn: on a
// server that TrainsMessages, ART trains their earlier turns in the context
// its chat template renders for a past turn, which differs from the one
// they were sampled in when the template treats past turns differently
// (Qwen3 drops their <think> block, and renders no empty one).
func MultiTurn(trajs []trainer.Trajectory) int {
	n := 0
	for _, t := range trajs {
		turns := 0
		for _, raw := range t.MessagesAndChoices {
			if isChoice(raw) {
				turns++
			}
		}
		if turns > 1 {
			n++
		}
	}
	return n
}

// isChoice tells a sampled choice (an object with "message" and no "role")
// from a chat message.
func isChoice(raw json.RawMessage) bool {
	var item struct {
		Role    *string         `json:"role"`
		Message json.RawMessage `json:"message"`
	}
	return json.Unmarshal(raw, &item) == nil && item.Role == nil && item.Message != nil
}

// choiceMessage is the assistant message of a sampled choice as ART's
// get_messages builds it: role, content and, when there are any,
// tool_calls of id, type and function. Other keys vLLM adds (null
// tool_calls, reasoning_content, refusal) are left out: ART's pydantic
// message types would refuse some of them.
func choiceMessage(raw json.RawMessage) (json.RawMessage, error) {
	var c struct {
		Message struct {
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string          `json:"id"`
				Type     string          `json:"type"`
				Function json.RawMessage `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("sampled choice: %w", err)
	}
	m := struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls any             `json:"tool_calls,omitempty"`
	}{Role: "assistant", Content: c.Message.Content}
	if len(m.Content) == 0 {
		m.Content = json.RawMessage("null")
	}
	if len(c.Message.ToolCalls) > 0 {
		m.ToolCalls = c.Message.ToolCalls
	}
	b, err := encode(m)
	return bytes.TrimSpace(b), err
}

// checkChoices refuses a sampled choice (an item with "message" and no
// "role") whose logprobs are missing or whose tokens are not "token_id:<n>":
// ART's tokenizer asserts on the first and parses the number out of the
// second, and either failure fails the whole training call. /_log reads
// neither, so for logging only the items' JSON is checked.
func checkChoices(t trainer.Trajectory, forTraining bool) error {
	for i, raw := range t.MessagesAndChoices {
		var item struct {
			Role     *string         `json:"role"`
			Message  json.RawMessage `json:"message"`
			Logprobs *struct {
				Content []struct {
					Token string `json:"token"`
				} `json:"content"`
			} `json:"logprobs"`
		}
		if err := json.Unmarshal(raw, &item); err != nil {
			return fmt.Errorf("group %s episode %s agent %d item %d: not a JSON object: %w", t.Group, t.Episode, t.Agent, i, err)
		}
		if !forTraining || item.Role != nil || item.Message == nil {
			continue // a message, not a sampled choice
		}
		if item.Logprobs == nil || len(item.Logprobs.Content) == 0 {
			return fmt.Errorf("group %s episode %s agent %d item %d: sampled choice without logprobs; ART trains only on choices with logprobs.content (ask the inference server for logprobs)", t.Group, t.Episode, t.Agent, i)
		}
		for j, c := range item.Logprobs.Content {
			if !strings.HasPrefix(c.Token, "token_id:") {
				return fmt.Errorf("group %s episode %s agent %d item %d token %d: %q is not in vLLM's token_id:<n> form; ART reads the sampled token ids from it (vLLM's --return-tokens-as-token-ids, which ART's own vLLM sets)", t.Group, t.Episode, t.Agent, i, j, c.Token)
			}
		}
	}
	return nil
}

// ValidateAdvantage refuses advantage settings whose values ART would
// change on the way. ART computes, per group of trajectories,
// (reward - mean) and, unless told scale_rewards=false, divides by the
// group's population standard deviation plus 1e-6. grpo sends its
// advantages as the rewards, and they already have mean 0, so:
//
//   - With a server that accepts scale_rewards (p.ScaleRewards), Train sends
//     scale_rewards=false and ART trains on grpo's advantages up to one
//     factor per step (its mean |advantage| rescale), which keeps how
//     groups and trajectories weigh against each other: every setting is
//     accepted.
//   - Otherwise ART rescales every group to unit standard deviation. That is
//     what grpo's default estimator already produces (population std, mean
//     baseline, std normalisation on), up to grpo's own 1e-6: accepted.
//     std_normalize: false (Dr. GRPO) would be turned into GRPO,
//     std: unbiased would lose its sqrt(n/(n-1)) factor and
//     baseline: leave-one-out would lose its n/(n-1) factor: refused.
func ValidateAdvantage(opt grpo.AdvantageOptions, p Protocol) error {
	if p.ScaleRewards {
		return nil
	}
	why := "this ART server (" + p.Releases + ", without scale_rewards) divides every group's advantages by their standard deviation"
	switch {
	case !opt.StdNormalize:
		return fmt.Errorf("grpo.advantage.std_normalize: false is not accepted with trainer.kind: art: %s, which would undo it; accepted: std_normalize: true, std: %s, baseline: %s, or an ART server of 0.4.4 to 0.5.0", why, grpo.StdPopulation, grpo.BaselineMean)
	case opt.Std != grpo.StdPopulation:
		return fmt.Errorf("grpo.advantage.std: %q is not accepted with trainer.kind: art: %s using the population std, which would undo it; accepted: %s, or an ART server of 0.4.4 to 0.5.0", opt.Std, why, grpo.StdPopulation)
	case opt.Baseline != grpo.BaselineMean:
		return fmt.Errorf("grpo.advantage.baseline: %q is not accepted with trainer.kind: art: %s, which would remove the leave-one-out n/(n-1) scale; accepted: %s, or an ART server of 0.4.4 to 0.5.0", opt.Baseline, why, grpo.BaselineMean)
	}
	return nil
}

// Tolerances of checkAdvantages. grpo's advantages have a group mean of 0
// up to rounding. Their standard deviation is s/(s+1e-6) for a reward std
// s, within 1% of 1 for any s above 1e-4.
const (
	meanTolerance = 1e-6
	stdTolerance  = 1e-2
)

// checkAdvantages verifies that ART will train on the advantages as sent:
// each group's advantages (sent as rewards) must have mean 0 and, when the
// server divides by their std, a population std of 1 or all be 0. A group
// that fails was built by another estimator than ValidateAdvantage
// accepts, or lost its zero-advantage trajectories.
func checkAdvantages(groups []TrajectoryGroup, p Protocol) error {
	for gi, g := range groups {
		n := float64(len(g.Trajectories))
		if n == 0 {
			continue
		}
		var sum, maxAbs float64
		for _, t := range g.Trajectories {
			sum += t.Reward
			maxAbs = max(maxAbs, math.Abs(t.Reward))
		}
		mean := sum / n
		name := groupName(g, gi)
		if math.Abs(mean) > meanTolerance*max(1, maxAbs) {
			return fmt.Errorf("ART group %s: advantages average %g, not 0; ART subtracts the group mean, so they would not be trained as sent", name, mean)
		}
		if p.ScaleRewards || maxAbs == 0 {
			continue
		}
		var ss float64
		for _, t := range g.Trajectories {
			ss += (t.Reward - mean) * (t.Reward - mean)
		}
		if std := math.Sqrt(ss / n); math.Abs(std-1) > stdTolerance {
			return fmt.Errorf("ART group %s: advantages have standard deviation %g; this ART server (%s) divides them by it, so they would not be trained as sent (were zero-advantage trajectories left out, or is the reward spread under 1e-4?)", name, std, p.Releases)
		}
	}
	return nil
}

func groupName(g TrajectoryGroup, i int) string {
	if len(g.Trajectories) > 0 {
		if s, ok := g.Trajectories[0].Metadata[MetaGroup].(string); ok && s != "" {
			return s
		}
	}
	return fmt.Sprintf("#%d", i)
}
