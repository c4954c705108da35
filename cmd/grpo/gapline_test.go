package main

import (
	"strings"
	"testing"
)

// TestStepLineLogprobGap: a step whose trainer reported its sampler
// logprob gap shows it after the loss and KL; one whose trainer did not
// shows none (not a gap of 0).
func TestStepLineLogprobGap(t *testing.T) {
	for _, tt := range []struct{ metrics, want string }{
		{`{"loss":0.125,"kl":0.01,"sampler_logprob_gap":0.5,"entropy":1.25}`, "  loss 0.125 kl 0.01 logprob gap 0.5"},
		{`{"loss":0.125,"kl":0.01,"sampler_logprob_gap":0}`, "  loss 0.125 kl 0.01 logprob gap 0"},
		{`{"loss":0.125,"kl":0.01}`, "  loss 0.125 kl 0.01"},
	} {
		e := decodeEvents(t, `{"type":"step_committed","run":"r","step":1,"data":{"step":1,"n":5,"train":{"reward_mean":0.75},"job":{"id":"r/step-0001","state":"succeeded","metrics":`+tt.metrics+`}}}`)[0]
		if got := stepSummary(e, nil); !strings.HasSuffix(got, "train 0.750"+tt.want) {
			t.Errorf("stepSummary(metrics %s)=%q, want it to end with %q", tt.metrics, got, "train 0.750"+tt.want)
		}
	}
}
