package inference

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/testutil"
)

func TestFleet_ProbeDrainsHungReplica(t *testing.T) {
	// One replica accepts connections and never answers, the other is
	// fine: the run starts on the second when the start's deadline passes,
	// the first drained with an error saying it did not answer.
	hung := testutil.HungServer(t)
	_, ok := newFakeVLLM(t)
	var mu sync.Mutex
	var changes []EndpointChange
	f := testFleet(t, FleetOptions{OnEndpoint: func(c EndpointChange) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, c)
	}}, hung, ok.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := f.Probe(ctx); err != nil {
		t.Fatalf("Probe()=%v, want nil with one replica answering", err)
	}
	if got, want := f.Live(), []bool{false, true}; !slices.Equal(got, want) {
		t.Fatalf("Live()=%v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || changes[0].URL != hung+"/v1" || changes[0].Up ||
		changes[0].Err == nil || !strings.Contains(changes[0].Err.Error(), "no answer within") {
		t.Fatalf("endpoint changes=%+v, want %s drained for giving no answer in time", changes, hung)
	}
	// Only the hung replica: nothing to start on, an error naming it.
	f = testFleet(t, FleetOptions{}, hung)
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.Probe(ctx); err == nil || !strings.Contains(err.Error(), hung) {
		t.Fatalf("Probe()=%v, want an error naming %s", err, hung)
	}
}

func TestFleet_ProbeCancelled(t *testing.T) {
	// A start cancelled (Ctrl-C) is not an endpoint down: Probe fails
	// with the cancellation.
	hung := testutil.HungServer(t)
	_, ok := newFakeVLLM(t)
	f := testFleet(t, FleetOptions{}, hung, ok.URL)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Probe()=%v, want context.Canceled", err)
	}
}

func TestFleet_ProbeModels(t *testing.T) {
	a := staticServer(t, http.StatusOK, "application/json", `{"object":"list","data":[{"id":"m1","object":"model","root":"/w/m1"}]}`)
	b := staticServer(t, http.StatusOK, "application/json", `{"object":"list","data":[{"id":"m2","object":"model"}]}`)
	f := testFleet(t, FleetOptions{}, a.URL, b.URL)
	if err := f.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range f.Models() {
		ids = append(ids, m.ID+"@"+m.Root)
	}
	if got, want := ids, []string{"m1@/w/m1", "m2@"}; !slices.Equal(got, want) {
		t.Fatalf("Models()=%v, want %v", got, want)
	}
}

// pipeNet is an in-memory network of HTTP servers, by host name, over
// net.Pipe: inside a synctest bubble its waits are durable, so the
// bubble's clock runs to the next deadline at once.
type pipeNet struct {
	mu    sync.Mutex
	hosts map[string]*pipeListener
}

type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (n *pipeNet) listen(host string) *pipeListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	n.hosts[host] = l
	return l
}

func (n *pipeNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.hosts[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dial %s: no such host", addr)
	}
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("dial %s: %w", addr, net.ErrClosed)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func TestFleet_ProbeOneDeadline(t *testing.T) {
	// A hundred replicas accept and never answer, one answers: the start
	// takes the one deadline (10s), not a share of it per replica, and
	// starts on the one that answered.
	synctest.Test(t, func(t *testing.T) {
		n := &pipeNet{hosts: map[string]*pipeListener{}}
		tr := &http.Transport{DialContext: n.dial}
		hc := &http.Client{Transport: tr}
		var held []net.Conn
		var heldMu sync.Mutex
		var rs []Replica
		var servers []*http.Server
		for i := range 101 {
			host := fmt.Sprintf("replica-%d:8000", i)
			l := n.listen(host)
			if i == 100 {
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
				})}
				servers = append(servers, srv)
				go srv.Serve(l)
			} else {
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						heldMu.Lock()
						held = append(held, c)
						heldMu.Unlock()
					}
				}()
			}
			u := "http://" + host + "/v1"
			rs = append(rs, Replica{
				Chat:  NewChatClient(u, ChatOptions{HTTPClient: hc, Retry: &httpx.Policy{}}),
				Admin: NewAdminClient(u, AdminOptions{HTTPClient: hc, Retry: &httpx.Policy{}}),
			})
		}
		f := NewFleet(rs, FleetOptions{})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := f.Probe(ctx)
		cancel()
		elapsed := time.Since(start)
		if err != nil {
			t.Fatalf("Probe()=%v, want nil with one replica answering", err)
		}
		if elapsed != 10*time.Second {
			t.Fatalf("Probe took %v on the bubble's clock, want the one deadline, 10s", elapsed)
		}
		live := f.Live()
		if got, want := slices.Index(live, true), 100; got != want || slices.Contains(live[:100], true) {
			t.Fatalf("Live()=%v, want only endpoint 100 live", live)
		}
		if got := len(f.Models()); got != 1 {
			t.Fatalf("len(Models())=%d, want 1", got)
		}

		f.Close()
		for _, srv := range servers {
			srv.Close()
		}
		for _, l := range n.hosts {
			l.Close()
		}
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
		tr.CloseIdleConnections()
		synctest.Wait()
	})
}
