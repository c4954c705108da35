package inference

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPoolSpreadsByOutstanding(t *testing.T) {
	// Endpoint A blocks until released; B answers at once. With A busy,
	// the next requests must go to B.
	release := make(chan struct{})
	var hitsA, hitsB atomic.Int64
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		<-release
		w.Write([]byte(okCompletion))
	}))
	defer a.Close()
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsB.Add(1)
		w.Write([]byte(okCompletion))
	}))
	defer b.Close()
	p := NewPool(NewChatClient(a.URL+"/v1", ChatOptions{}), NewChatClient(b.URL+"/v1", ChatOptions{}))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := p.Complete(context.Background(), chatReq()); err != nil {
			t.Error(err)
		}
	}()
	for hitsA.Load() == 0 {
		// wait until the first request is in flight at A
		runtime.Gosched()
	}
	for range 5 {
		if _, err := p.Complete(context.Background(), chatReq()); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	wg.Wait()
	if hitsA.Load() != 1 || hitsB.Load() != 5 {
		t.Fatalf("hits A=%d B=%d, want 1 and 5", hitsA.Load(), hitsB.Load())
	}
}
