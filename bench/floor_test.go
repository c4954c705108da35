package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestMeasureFloor: every agent makes its calls against ServeLLM,
// and the measurement counts them; a server that refuses them fails it,
// naming the answer.
func TestMeasureFloor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan string, 1)
	go ServeLLM(ctx, 5*time.Millisecond, func(a string) { addr <- a })
	base := "http://" + <-addr
	tp, err := MeasureFloor(ctx, RolloutOptions{BaseURL: base + "/v1", Service: 5 * time.Millisecond, Agents: 20, Rounds: 3})
	if err != nil {
		t.Fatal(err)
	}
	if tp.Calls != 60 || tp.Agents != 20 || tp.CPUPerCall <= 0 || tp.Wall < 15*time.Millisecond || tp.Ideal != 15*time.Millisecond {
		t.Fatalf("floor of 20 agents x 3 calls at 5 ms: %+v", tp)
	}
	if _, err := MeasureFloor(ctx, RolloutOptions{BaseURL: base + "/nowhere", Service: time.Millisecond, Agents: 2}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("floor against a path the server does not serve: %v, want its 404", err)
	}
	if _, err := MeasureFloor(ctx, RolloutOptions{BaseURL: "not a url", Agents: 2}); err == nil || !strings.Contains(err.Error(), "not a url") {
		t.Fatalf("floor with a bad base URL: %v", err)
	}
	b, err := json.Marshal(floorRequest(7))
	if err != nil || len(b) != floorRequestBytes {
		t.Fatalf("floor request: %d bytes (%v), want %d", len(b), err, floorRequestBytes)
	}
}
