package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// TestEpisodeKeepsRounds: with KeepRounds, an episode keeps each round's
// moves (action, success, forks held after the round, raw output); without
// it, none. Philosopher 1 answers garbage; the others pick up their left
// fork, which works in round 0 (forks 0, 2, 3, 4) and fails afterwards.
func TestEpisodeKeepsRounds(t *testing.T) {
	srv := rollouttest.New(func(s rollout.State) string {
		if s.ID == 1 {
			return `<tool_call>{"name": "eat"</tool_call>`
		}
		return rollout.PickUpLeft
	})
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{})}
	for _, mode := range []rollout.Mode{rollout.Simultaneous, rollout.Sequential} {
		sp := spec(5, mode)
		if ep := r.Run(context.Background(), sp); ep.Errored || ep.Rounds != nil {
			t.Fatalf("%s without KeepRounds: errored %v, %d rounds", mode, ep.Errored, len(ep.Rounds))
		}
		sp.KeepRounds = true
		ep := r.Run(context.Background(), sp)
		if ep.Errored {
			t.Fatalf("%s: %s", mode, ep.Error)
		}
		if len(ep.Rounds) != sp.Env.Rounds {
			t.Fatalf("%s: %d rounds kept, want %d", mode, len(ep.Rounds), sp.Env.Rounds)
		}
		for k, rd := range ep.Rounds[:2] {
			if rd.Round != k+1 || len(rd.Moves) != 5 {
				t.Fatalf("%s: round %d: %+v", mode, k, rd)
			}
			for i, m := range rd.Moves {
				wantAction, wantOK, wantForks := rollout.PickUpLeft, k == 0, fmt.Sprint([]int{i})
				if i == 1 {
					wantAction, wantOK, wantForks = rollout.Invalid, false, "[]"
				}
				if m.Action != wantAction || m.OK != wantOK || fmt.Sprint(m.Forks) != wantForks {
					t.Errorf("%s round %d philosopher %d: %s ok=%v forks %v, want %s ok=%v forks %s", mode, k, i, m.Action, m.OK, m.Forks, wantAction, wantOK, wantForks)
				}
				wantOut := rollout.PickUpLeft
				if i == 1 {
					wantOut = `{\"name\": \"eat\"`
				}
				if !strings.Contains(m.Output, wantOut) {
					t.Errorf("%s round %d philosopher %d: output %q lacks %q", mode, k, i, m.Output, wantOut)
				}
			}
		}
	}
}

func TestEpisodeRoundOutputCapped(t *testing.T) {
	long := strings.Repeat("é", 3000) + rollout.Think
	srv := rollouttest.New(func(rollout.State) string { return long })
	defer srv.Close()
	r := &rollout.Runner{Client: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{})}
	sp := spec(3, rollout.Simultaneous)
	sp.KeepRounds = true
	ep := r.Run(context.Background(), sp)
	if ep.Errored || len(ep.Rounds) == 0 {
		t.Fatalf("errored %v (%s), %d rounds", ep.Errored, ep.Error, len(ep.Rounds))
	}
	out := ep.Rounds[0].Moves[0].Output
	if len(out) > rollout.ReplayOutputBytes || !strings.HasSuffix(out, "…") || !strings.Contains(out, "éé") {
		t.Errorf("capped output: %d bytes, ends %q", len(out), out[max(0, len(out)-8):])
	}
}
