package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/grpo-dev/grpo/orchestrator"
)

func TestHubDropsSlowClient(t *testing.T) {
	h := newHub(2, 100)
	slow, _ := h.subscribe("")
	fast, _ := h.subscribe("a")
	other, _ := h.subscribe("b")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 5 {
			h.publish(orchestrator.Event{Type: orchestrator.EventStepStarted, Run: "a", Step: i})
			// fast drains as it goes; slow never reads.
			<-fast.send
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("publish blocked on a slow client")
	}
	select {
	case <-slow.gone:
	default:
		t.Fatal("slow client not dropped")
	}
	if got, want := slow.reason, reasonSlow; got != want {
		t.Fatalf("reason=%q, want %q", got, want)
	}
	if got, want := len(slow.send), 2; got != want {
		t.Fatalf("slow client queue=%d, want %d (the buffer)", got, want)
	}
	select {
	case <-fast.gone:
		t.Fatal("fast client dropped")
	default:
	}
	if got, want := len(other.send), 0; got != want {
		t.Fatalf("run b client got %d events of run a", got)
	}
	if got, want := h.len(), 2; got != want {
		t.Fatalf("clients=%d, want %d", got, want)
	}
	// Publishing on after the drop neither blocks nor panics.
	h.publish(orchestrator.Event{Type: orchestrator.EventRunFinished, Run: "a"})
	var e orchestrator.Event
	if err := json.Unmarshal(<-fast.send, &e); err != nil || e.Type != orchestrator.EventRunFinished {
		t.Fatalf("fast got %+v, %v", e, err)
	}
	h.close()
	if c, err := h.subscribe(""); c != nil || err != errHubClosed {
		t.Fatal("subscribe after close")
	}
	select {
	case <-fast.gone:
	default:
		t.Fatal("close did not drop clients")
	}
}
