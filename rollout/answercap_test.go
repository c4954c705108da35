package rollout_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/grpo-dev/grpo/inference"
	"github.com/grpo-dev/grpo/rollout"
	"github.com/grpo-dev/grpo/rollout/rollouttest"
)

// sizeRecorder records the largest conversation sent in one request.
type sizeRecorder struct {
	next    rollout.Completer
	mu      sync.Mutex
	largest int
}

func (s *sizeRecorder) Complete(ctx context.Context, req *rollout.Request) (*rollout.Completion, error) {
	n := 0
	for _, m := range req.Messages {
		n += len(m.Content)
	}
	s.mu.Lock()
	s.largest = max(s.largest, n)
	s.mu.Unlock()
	return s.next.Complete(ctx, req)
}

// TestAnswerCap: an answer over the cap is an invalid output, counted as
// oversized, and neither kept in the conversation nor sent again.
func TestAnswerCap(t *testing.T) {
	long := strings.Repeat("x", 70000)
	srv := rollouttest.New(func(s rollout.State) string {
		if s.ID == 1 {
			return long
		}
		return rollout.Think
	})
	defer srv.Close()
	for _, tt := range []struct {
		name      string
		cap       int
		oversized int
	}{
		{"default cap 64 KiB", 0, 5},
		{"cap above the answer", 100000, 0},
	} {
		rec := &sizeRecorder{next: inference.NewChatClient(srv.BaseURL(), inference.ChatOptions{})}
		r := &rollout.Runner{Client: rec, MaxAnswerBytes: tt.cap}
		ep := r.Run(context.Background(), spec(5, rollout.Simultaneous))
		if ep.Errored {
			t.Fatalf("%s: errored: %s", tt.name, ep.Error)
		}
		// Agent 1 answers no tool call in each of 5 rounds: 5 invalid
		// outputs either way; oversized only when over the cap.
		if ep.Metrics.Invalid != 5 || ep.Metrics.Oversized != tt.oversized {
			t.Fatalf("%s: invalid %d oversized %d, want 5 and %d", tt.name, ep.Metrics.Invalid, ep.Metrics.Oversized, tt.oversized)
		}
		kept := 0
		for _, item := range ep.Transcripts[1].MessagesAndChoices {
			kept = max(kept, len(item))
		}
		if tt.oversized > 0 {
			if kept >= 70000 || rec.largest >= 70000 {
				t.Fatalf("%s: a dropped answer was kept (%d bytes) or sent again (%d bytes)", tt.name, kept, rec.largest)
			}
			if !strings.Contains(string(ep.Transcripts[1].MessagesAndChoices[2]), "answer of 70000 bytes dropped: over the 65536-byte cap") {
				t.Fatalf("%s: transcript item %s, want the note", tt.name, ep.Transcripts[1].MessagesAndChoices[2])
			}
		} else if kept < 70000 || rec.largest < 4*70000 {
			t.Fatalf("%s: answer under the cap not kept and re-sent: kept %d, largest request %d", tt.name, kept, rec.largest)
		}
	}
}
