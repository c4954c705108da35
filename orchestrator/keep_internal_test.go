package orchestrator

import (
	"slices"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
)

func TestRecentAdapters(t *testing.T) {
	a := func(n int) *checkpoint.Adapter {
		return &checkpoint.Adapter{Name: "r-step-000" + string(rune('0'+n)), Path: "/ckpt/000" + string(rune('0'+n))}
	}
	// Step 0 is the base model; step 3 had no signal and kept step 2's
	// adapter; step 4 trained again.
	steps := []checkpoint.Step{{Step: 0}, {Step: 1, Adapter: a(1)}, {Step: 2, Adapter: a(2)}, {Step: 3, Adapter: a(2)}, {Step: 4, Adapter: a(4)}}
	for _, c := range []struct {
		keep  int
		steps []checkpoint.Step
		want  []string
	}{
		{0, steps, []string{"/ckpt/0004"}}, // the last step's adapter is always kept
		{1, steps, []string{"/ckpt/0004"}},
		{2, steps, []string{"/ckpt/0002", "/ckpt/0004"}},
		{3, steps, []string{"/ckpt/0001", "/ckpt/0002", "/ckpt/0004"}},
		{9, steps, []string{"/ckpt/0001", "/ckpt/0002", "/ckpt/0004"}}, // the base model has none
		{2, steps[:4], []string{"/ckpt/0001", "/ckpt/0002"}},
		{2, steps[:1], nil},
	} {
		var got []string
		for _, ad := range recentAdapters(c.steps, c.keep) {
			got = append(got, ad.Path)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("recentAdapters(%d steps, keep %d)=%v, want %v", len(c.steps), c.keep, got, c.want)
		}
	}
}
