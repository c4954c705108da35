package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/checkpoint"
)

// TestRunsListsResults: 'grpo runs' shows each run's best step, its value
// and its validation's deadlock rate, in text and JSON, in the order
// --sort asks for.
func TestRunsListsResults(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "grpo.db")
	store := checkpoint.New(db, checkpoint.Options{})
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Created in the order a, b, c, d; their best values (reward_mean)
	// 0.5, 0.75, none, and d minimises deadlock_rate: its best 0.25.
	for i, r := range []checkpoint.Run{
		{Name: "b", Policy: checkpoint.PolicyBestValidation},
		{Name: "a", Policy: checkpoint.PolicyBestValidation},
		{Name: "c", Policy: checkpoint.PolicyBestValidation},
		{Name: "d", Policy: checkpoint.PolicyBestValidation, Metric: checkpoint.MetricDeadlockRate},
	} {
		r.Created = t0.Add(time.Duration(i) * time.Hour)
		r.State = checkpoint.StateSucceeded
		if err := store.CreateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(run string, evals ...checkpoint.Evaluation) {
		for i, ev := range evals {
			ev.Step = i
			if err := store.CommitStep(ctx, run, checkpoint.Step{Step: i}, &ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	commit("b", checkpoint.Evaluation{RewardMean: 0.5, DeadlockRate: 0.5})
	commit("a", checkpoint.Evaluation{RewardMean: 0.25, DeadlockRate: 0.75}, checkpoint.Evaluation{RewardMean: 0.75, DeadlockRate: 0.125})
	if err := store.CommitStep(ctx, "c", checkpoint.Step{Step: 0}, nil); err != nil {
		t.Fatal(err)
	}
	commit("d", checkpoint.Evaluation{RewardMean: 0.1, DeadlockRate: 0.5}, checkpoint.Evaluation{RewardMean: 0.2, DeadlockRate: 0.25}, checkpoint.Evaluation{RewardMean: 0.3, DeadlockRate: 0.375})

	order := func(args ...string) string {
		t.Helper()
		code, out, errs := cli(t, append([]string{"runs", "--db", db, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("runs %v: exit %d: %s", args, code, errs)
		}
		var list []checkpoint.RunSummary
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("runs %v --json: %v\n%s", args, err, out)
		}
		var names []string
		for _, r := range list {
			names = append(names, r.Name)
		}
		return strings.Join(names, " ")
	}
	for _, tt := range []struct{ sort, want string }{
		{"", "b a c d"}, // created
		{"created", "b a c d"},
		{"name", "a b c d"},
		{"steps", "d a b c"},
		// best first by each run's metric: d's deadlock rate 0.25 is
		// -0.25 on the common scale, below b's 0.5; c has none.
		{"best", "a b d c"},
		{"deadlock", "a d b c"},
	} {
		args := []string{}
		if tt.sort != "" {
			args = append(args, "--sort", tt.sort)
		}
		if got := order(args...); got != tt.want {
			t.Errorf("runs --sort %q: %s, want %s", tt.sort, got, tt.want)
		}
	}

	code, out, _ := cli(t, "runs", "--db", db, "--sort", "best")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 {
		t.Fatalf("runs: exit %d\n%s", code, out)
	}
	for i, want := range [][]string{
		{"NAME", "STATE", "STEPS", "BEST STEP", "BEST VALUE", "DEADLOCK", "CREATED"},
		{"a ", "succeeded", " 1 ", "0.750 reward_mean", "0.125"},
		{"b ", "0.500 reward_mean", "0.500"},
		{"d ", " 2 ", "0.250 deadlock_rate", "0.250"},
		{"c ", " 0 ", "-  "},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	code, _, errs := cli(t, "runs", "--db", db, "--sort", "reward")
	if code != 2 || !strings.Contains(errs, `--sort "reward": accepted: created, name, state, steps, best, deadlock`) {
		t.Fatalf("runs --sort reward: exit %d: %s, want exit 2 naming the accepted keys", code, errs)
	}
	code, out, errs = cli(t, "runs", "--help")
	if help := out + errs; code != 0 || !strings.Contains(help, "[--sort KEY]") || !strings.Contains(help, "created, name, state, steps, best, deadlock") {
		t.Fatalf("runs --help: exit %d, want the --sort keys\n%s", code, help)
	}
}
