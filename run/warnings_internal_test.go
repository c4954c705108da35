package run

import (
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/config"
)

// TestStartWarnings: the start-of-run rule on configs: a learning rate
// more than a factor of 100 from the reference backend's is warned of
// when the run trains that backend (embedded, or served on its own and
// named by its model), not on another model.
func TestStartWarnings(t *testing.T) {
	for doc, want := range map[string]int{
		"": 0,
		"trainer: {hyperparameters: {learning_rate: 0.05}}":   0,
		"trainer: {hyperparameters: {learning_rate: 5.0e-6}}": 1,
		"trainer: {hyperparameters: {learning_rate: 1000}}":   1,
		"inference: {endpoints: [{url: http://127.0.0.1:1/v1}], model: m}\ntrainer: {kind: jobs, base_model: m, hyperparameters: {learning_rate: 5.0e-6}}": 0,
		// The reference backend served on its own: its model's name says so.
		"inference: {endpoints: [{url: http://127.0.0.1:1/v1}], model: refmodel}\ntrainer: {kind: jobs, base_model: refmodel, hyperparameters: {learning_rate: 5.0e-6}}": 1,
		"inference: {endpoints: [{url: http://127.0.0.1:1/v1}], model: refmodel}\ntrainer: {kind: jobs, base_model: refmodel, hyperparameters: {learning_rate: 1}}":      0,
	} {
		cfg, err := config.Parse([]byte(doc), config.WithEmbedded(ConfigDefaults()))
		if err != nil {
			t.Fatal(err)
		}
		ws := startWarnings(cfg)
		if len(ws) != want {
			t.Errorf("%q: warnings %+v, want %d", doc, ws, want)
		}
		for _, w := range ws {
			if w.Code != WarnLearningRate || !strings.Contains(w.Message, "trainer.hyperparameters.learning_rate") || !strings.Contains(w.Message, "flat") {
				t.Errorf("%q: warning %+v does not name the key and its effect", doc, w)
			}
		}
	}
}

// TestUnchangedWarning: the end-of-run rule on hand-made evaluations.
func TestUnchangedWarning(t *testing.T) {
	rec := func(n int, seed int64, reward float64) checkpoint.EpisodeRecord {
		return checkpoint.EpisodeRecord{N: n, Seed: seed, Reward: reward, Meals: 3}
	}
	ev := func(step int, recs ...checkpoint.EpisodeRecord) checkpoint.Evaluation {
		return checkpoint.Evaluation{Step: step, Records: recs}
	}
	base := ev(0, rec(5, 1, 0.5), rec(5, 2, 0.25))
	for _, tc := range []struct {
		name  string
		evals []checkpoint.Evaluation
		want  bool
	}{
		{"every step as the base", []checkpoint.Evaluation{base, ev(1, rec(5, 1, 0.5), rec(5, 2, 0.25)), ev(2, rec(5, 1, 0.5), rec(5, 2, 0.25))}, true},
		{"one episode changed at one step", []checkpoint.Evaluation{base, ev(1, rec(5, 1, 0.5), rec(5, 2, 0.25)), ev(2, rec(5, 1, 0.5), rec(5, 2, 0.75))}, false},
		{"meals changed, reward equal", []checkpoint.Evaluation{base, ev(1, rec(5, 1, 0.5), checkpoint.EpisodeRecord{N: 5, Seed: 2, Reward: 0.25, Meals: 4})}, false},
		{"an errored episode left out", []checkpoint.Evaluation{base, ev(1, rec(5, 1, 0.5), checkpoint.EpisodeRecord{N: 5, Seed: 2, Errored: true})}, true},
		{"only the base validated", []checkpoint.Evaluation{base}, false},
		{"no base", []checkpoint.Evaluation{ev(1, rec(5, 1, 0.5))}, false},
		{"no shared table", []checkpoint.Evaluation{base, ev(1, rec(7, 1, 0.5))}, false},
		{"records not stored", []checkpoint.Evaluation{ev(0), ev(1)}, false},
	} {
		w, ok := unchangedWarning(tc.evals)
		if ok != tc.want {
			t.Errorf("%s: warning %+v, want one: %v", tc.name, w, tc.want)
		}
		if ok && w.Code != WarnValidationUnchanged {
			t.Errorf("%s: code %q, want %q", tc.name, w.Code, WarnValidationUnchanged)
		}
	}
	for _, tc := range []struct {
		evals []checkpoint.Evaluation
		want  string
	}{
		{[]checkpoint.Evaluation{base, ev(3, rec(5, 1, 0.5))}, "at each of the 1 step validated after step 0"},
		{[]checkpoint.Evaluation{base, ev(1, rec(5, 1, 0.5)), ev(2, rec(5, 2, 0.25))}, "at each of the 2 steps validated after step 0"},
	} {
		if w, _ := unchangedWarning(tc.evals); !strings.Contains(w.Message, tc.want) {
			t.Errorf("warning %q does not contain %q", w.Message, tc.want)
		}
	}
}
