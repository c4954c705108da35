package server

import (
	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/orchestrator"
)

// The API's JSON shapes are those of `grpo runs --json`, `grpo runs show
// --json` and `grpo best --json` (checkpoint.RunView and BestView), with a
// "hosted" flag added: whether the run plays in this daemon now.

// RunListItem is one element of GET /api/v1/runs.
type RunListItem struct {
	checkpoint.RunSummary
	Hosted bool `json:"hosted"`
}

// RunDetail is GET /api/v1/runs/{id} (and the answer of POST
// /api/v1/runs): the run's view and, for a run playing in this daemon, the
// endpoint_state event (docs/EVENTS.md) of each of its inference endpoints
// drained now, oldest first, and its warning events, in order; each
// absent when there is none.
type RunDetail struct {
	checkpoint.RunView
	EndpointsDown []orchestrator.Event `json:"endpoints_down,omitempty"`
	Warnings      []orchestrator.Event `json:"warnings,omitempty"`
}
