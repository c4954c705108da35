package server

import "github.com/grpo-dev/grpo/checkpoint"

// The API's JSON shapes are those of `grpo runs --json`, `grpo runs show
// --json` and `grpo best --json` (checkpoint.RunView and BestView), with a
// "hosted" flag added: whether the run plays in this daemon now.

// RunListItem is one element of GET /api/v1/runs.
type RunListItem struct {
	checkpoint.RunSummary
	Hosted bool `json:"hosted"`
}
