package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/grpo-dev/grpo/checkpoint"
	"github.com/grpo-dev/grpo/server"
)

// TestListRunsPaged: GET /api/v1/runs answers pages in name order
// (?limit=N&after=NAME), each run's summary with its best step's value and
// deadlock rate, and a Link to the next page while there is one; a bad
// limit is a 400 naming what is accepted.
func TestListRunsPaged(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, name := range []string{"c", "a", "exp/b", "b"} {
		if err := e.store.CreateRun(ctx, checkpoint.Run{Name: name, State: checkpoint.StateSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.CommitStep(ctx, "b", checkpoint.Step{Step: 0}, &checkpoint.Evaluation{Step: 0, RewardMean: 0.5, DeadlockRate: 0.25}); err != nil {
		t.Fatal(err)
	}
	s := e.MustStart(t, server.Options{})
	type item struct {
		Name             string   `json:"name"`
		BestStep         int      `json:"best_step"`
		BestValue        *float64 `json:"best_value"`
		BestDeadlockRate *float64 `json:"best_deadlock_rate"`
	}
	var names []string
	page := s.URL() + "/api/v1/runs?limit=3"
	for pages := 0; page != ""; pages++ {
		if pages == 2 {
			t.Fatalf("more than 2 pages of 3 for 4 runs")
		}
		resp, err := http.Get(page)
		if err != nil {
			t.Fatal(err)
		}
		var list []item
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("GET %s = %d %v", page, resp.StatusCode, err)
		}
		for _, r := range list {
			names = append(names, r.Name)
			if r.Name == "b" && (r.BestStep != 0 || r.BestValue == nil || *r.BestValue != 0.5 || r.BestDeadlockRate == nil || *r.BestDeadlockRate != 0.25) {
				t.Fatalf("run b = %+v, want best step 0 at 0.5, deadlock rate 0.25", r)
			}
		}
		page = ""
		if link := resp.Header.Get("Link"); link != "" {
			target, ok := strings.CutPrefix(link, "<")
			target, _, ok2 := strings.Cut(target, ">; rel=\"next\"")
			if !ok || !ok2 {
				t.Fatalf("Link %q, want <URL>; rel=\"next\"", link)
			}
			page = s.URL() + target
		}
	}
	if got, want := strings.Join(names, " "), "a b c exp/b"; got != want {
		t.Fatalf("runs over the pages = %s, want %s", got, want)
	}
	for _, bad := range []string{"0", "1001", "x"} {
		code, body := do(t, "GET", s.URL()+"/api/v1/runs?limit="+bad, "", "")
		if code != http.StatusBadRequest || !contains(body, "accepted: a whole number from 1 to 1000") {
			t.Errorf("GET ?limit=%s = %d %s, want 400 naming the accepted limits", bad, code, body)
		}
	}
}
