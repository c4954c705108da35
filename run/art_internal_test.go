package run

import (
	"context"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/trainer"
)

// TestARTReattachWithoutState: a job stored with no ART step cannot be
// reattached, and the error says why without naming the job, which the
// orchestrator's "reattach trainer job ID: ..." already does.
func TestARTReattachWithoutState(t *testing.T) {
	tr := &artTrainer{before: map[string]int{}}
	err := tr.Reattach(context.Background(), trainer.JobRequest{ID: "r.x/step-0002"}, nil)
	if err == nil || strings.Contains(err.Error(), "step-0002") || !strings.Contains(err.Error(), "no ART step was recorded") {
		t.Fatalf("reattach without a recorded ART step: %v; want the reason, not the job (the orchestrator names it)", err)
	}
}
