package evaluate_test

import (
	"fmt"
	"testing"

	"github.com/grpo-dev/grpo/evaluate"
	"github.com/grpo-dev/grpo/rollout"
)

// TestSetTranscriptsKeepsFirstEpisodesPerN: Transcripts 1 marks the first
// episode at each table size to keep its rounds, and Replays keeps exactly
// those, move for move.
func TestSetTranscriptsKeepsFirstEpisodesPerN(t *testing.T) {
	s := evaluate.Set{N: []int{5, 6}, Episodes: 3, Transcripts: 1,
		Seeds: func(n, e int) (int64, int64) { return int64(e), 0 },
		ID:    func(n, e int) string { return fmt.Sprintf("n%d-e%d", n, e) }}
	specs := s.Specs()
	var kept []string
	for _, sp := range specs {
		if sp.KeepRounds {
			kept = append(kept, sp.ID)
		}
	}
	if fmt.Sprint(kept) != "[n5-e0 n6-e0]" {
		t.Errorf("keep rounds: %v, want [n5-e0 n6-e0]", kept)
	}
	eps := make([]rollout.Episode, len(specs))
	for i, sp := range specs {
		eps[i] = rollout.Episode{Spec: sp, Reward: float64(i)}
		if sp.KeepRounds {
			eps[i].Rounds = []rollout.Round{{Round: 1, Moves: []rollout.Move{{Action: rollout.Eat, OK: true, Forks: []int{0, 1}, Output: "x"}}}}
		}
	}
	rps := evaluate.Replays(eps)
	if len(rps) != 2 || rps[0].ID != "n5-e0" || rps[1].ID != "n6-e0" || rps[1].N != 6 || rps[1].Reward != 3 {
		t.Fatalf("replays %+v", rps)
	}
	if m := rps[0].Rounds[0].Moves[0]; rps[0].Rounds[0].Round != 1 || m.Action != rollout.Eat || !m.OK || fmt.Sprint(m.Forks) != "[0 1]" || m.Output != "x" {
		t.Errorf("move %+v", m)
	}
	s.Transcripts = 0
	for _, sp := range s.Specs() {
		if sp.KeepRounds {
			t.Fatalf("transcripts 0 keeps %s", sp.ID)
		}
	}
}
