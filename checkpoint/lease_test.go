package checkpoint

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestLease(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	if err := s.CreateRun(ctx, Run{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "nope", LeaseOptions{}); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("lease of a missing run: %v, want ErrRunNotFound", err)
	}
	a, err := s.AcquireLease(ctx, "r", LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A second holder is refused with the first one named, and the run
	// record is untouched.
	before, _ := s.GetRun(ctx, "r")
	_, err = s.AcquireLease(ctx, "r", LeaseOptions{})
	if !errors.Is(err, ErrLeased) || !strings.Contains(err.Error(), "pid "+itoaTest(os.Getpid())) {
		t.Fatalf("second lease: %v, want ErrLeased naming pid %d", err, os.Getpid())
	}
	if after, _ := s.GetRun(ctx, "r"); after.State != before.State || !after.Updated.Equal(before.Updated) {
		t.Fatalf("a refused lease changed the run: %+v -> %+v", before, after)
	}
	info, live, err := s.GetLease(ctx, "r", LeaseOptions{})
	if err != nil || info == nil || !live || info.PID != os.Getpid() {
		t.Fatalf("GetLease = %+v, live %v, %v", info, live, err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if info, _, err := s.GetLease(ctx, "r", LeaseOptions{}); err != nil || info != nil {
		t.Fatalf("lease after Release: %+v, %v", info, err)
	}
	b, err := s.AcquireLease(ctx, "r", LeaseOptions{})
	if err != nil {
		t.Fatalf("lease after release: %v", err)
	}
	b.Release(ctx)
}

func itoaTest(i int) string { return strconv.Itoa(i) }

// TestLeaseStale: a lease whose heartbeat is old, or whose holder's pid
// is dead on this host, is taken over; the old holder's Keep then reports
// the loss.
func TestLeaseStale(t *testing.T) {
	ctx := context.Background()
	s := mustOpen(t)
	if err := s.CreateRun(ctx, Run{Name: "r"}); err != nil {
		t.Fatal(err)
	}
	clock := processStart.Add(time.Hour)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	old, err := s.AcquireLease(ctx, "r", LeaseOptions{now: now, Every: 5 * time.Millisecond, Stale: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Within the bound the lease holds.
	mu.Lock()
	clock = clock.Add(59 * time.Second)
	mu.Unlock()
	if _, err := s.AcquireLease(ctx, "r", LeaseOptions{now: now, Stale: time.Minute, Alive: func(int) bool { return false }}); !errors.Is(err, ErrLeased) {
		t.Fatalf("fresh lease (own pid) taken over: %v", err)
	}
	mu.Lock()
	clock = clock.Add(2 * time.Second)
	mu.Unlock()
	nw, err := s.AcquireLease(ctx, "r", LeaseOptions{now: now, Stale: time.Minute})
	if err != nil {
		t.Fatalf("stale lease (heartbeat 61 s old) not taken over: %v", err)
	}
	lost := make(chan error, 1)
	old.Keep(func(err error) { lost <- err })
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("lost with %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old holder never noticed the takeover")
	}
	old.Release(ctx) // must not remove the new holder's lease
	if info, live, _ := s.GetLease(ctx, "r", LeaseOptions{now: now}); info == nil || !live || info.Holder != nw.info.Holder {
		t.Fatalf("lease after the old holder's Release: %+v live %v, want the new holder's", info, live)
	}
	nw.Release(ctx)

	// A dead pid on this host: taken over at once. The record of another
	// (dead) process is written as a crashed process would leave it.
	host, _ := os.Hostname()
	dead := LeaseInfo{Holder: "x", PID: 1 << 30, Host: host, Started: time.Now(), Heartbeat: time.Now()}
	if err := s.update(ctx, func(tx *bolt.Tx) error { b, _ := runBucket(tx, "r"); return putLease(b, dead) }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "r", LeaseOptions{Alive: func(pid int) bool { return pid != 1<<30 }}); err != nil {
		t.Fatalf("lease of a dead pid not taken over: %v", err)
	}
	// A restarted container: the same pid and host, but a lease taken
	// before this process started, is a previous incarnation's.
	prev := LeaseInfo{Holder: "y", PID: os.Getpid(), Host: host, Started: processStart.Add(-time.Second), Heartbeat: time.Now()}
	if err := s.update(ctx, func(tx *bolt.Tx) error { b, _ := runBucket(tx, "r"); return putLease(b, prev) }); err != nil {
		t.Fatal(err)
	}
	if l, err := s.AcquireLease(ctx, "r", LeaseOptions{}); err != nil {
		t.Fatalf("lease of this pid's previous incarnation not taken over: %v", err)
	} else if _, err := s.AcquireLease(ctx, "r", LeaseOptions{}); !errors.Is(err, ErrLeased) {
		// ...while a lease this process took is live.
		t.Fatalf("this process's own live lease taken over: %v", err)
	} else {
		l.Release(ctx)
	}
	// The same record on another host is live until its heartbeat ages.
	if err := s.update(ctx, func(tx *bolt.Tx) error {
		b, _ := runBucket(tx, "r")
		d := dead
		d.Host = "elsewhere"
		return putLease(b, d)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "r", LeaseOptions{Alive: func(int) bool { return false }}); !errors.Is(err, ErrLeased) {
		t.Fatalf("a fresh lease of another host was taken over: %v", err)
	}
}
