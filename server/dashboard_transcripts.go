package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/grpo-dev/grpo/checkpoint"
)

// handleTranscripts serves the episode replays a step's validation kept
// (validation.transcripts per table size): GET
// /api/v1/runs/{id}/steps/{step}/transcripts, an empty list when it kept
// none.
func (s *Server) handleTranscripts(w http.ResponseWriter, r *http.Request) {
	step, err := strconv.Atoi(r.PathValue("step"))
	if err != nil || step < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("step %q: need a step number >= 0", r.PathValue("step")))
		return
	}
	_, _, evals, err := s.opts.Store.Snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		storeError(w, err)
		return
	}
	for _, ev := range evals {
		if ev.Step == step {
			out := ev.Transcripts
			if out == nil {
				out = []checkpoint.EpisodeReplay{}
			}
			writeJSON(w, http.StatusOK, out)
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("run %s has no validated step %d", r.PathValue("id"), step))
}
