package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// A lease says which process plays a run: at most one does. It lives in the
// run's bucket (key "lease") and is renewed by a heartbeat; a lease whose
// holder is dead (its pid is gone on this host) or whose heartbeat is older
// than LeaseOptions.Stale is stale, and the next process takes it over.
var leaseKey = []byte("lease")

// Errors of leases, usable with errors.Is.
var (
	// ErrLeased: another live process plays the run.
	ErrLeased = errors.New("run is being played by another process")
	// ErrLeaseLost: the lease was taken over (this process was presumed
	// dead) or removed; the holder must stop writing.
	ErrLeaseLost = errors.New("lease on the run was lost")
)

// LeaseInfo is the holder of a run's lease as stored.
type LeaseInfo struct {
	Holder    string    `json:"holder"` // random, one per Lease
	PID       int       `json:"pid"`
	Host      string    `json:"host"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
}

func (l LeaseInfo) String() string {
	return fmt.Sprintf("pid %d on %s since %s (last heartbeat %s)", l.PID, l.Host, l.Started.Format(time.RFC3339), l.Heartbeat.Format(time.RFC3339))
}

// LeaseOptions tune leases; zero fields take the defaults.
type LeaseOptions struct {
	Every time.Duration // heartbeat period (default 5 s)
	Stale time.Duration // a heartbeat older than this is stale (default 1 min)
	// Alive reports whether pid runs on this host (default: signal 0).
	Alive func(pid int) bool
	now   func() time.Time
}

func (o LeaseOptions) withDefaults() LeaseOptions {
	if o.Every <= 0 {
		o.Every = 5 * time.Second
	}
	if o.Stale <= 0 {
		o.Stale = time.Minute
	}
	if o.Alive == nil {
		o.Alive = processAlive
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o
}

// Lease is this process's hold on a run, from AcquireLease until Release.
type Lease struct {
	store *Store
	run   string
	info  LeaseInfo
	opts  LeaseOptions
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	kept  bool  // Keep was called
	err   error // why the heartbeat stopped, set before done is closed
}

// processStart is when this process started (near enough: when the
// package was initialised).
var processStart = time.Now()

// stale reports whether l may be taken over by a process on host: its
// heartbeat is old, or its holder is gone from this host — another pid that
// is dead, or this very pid before this process started (a restarted
// container reuses pid 1 and its hostname).
func (o LeaseOptions) stale(l LeaseInfo, host string) bool {
	if o.now().Sub(l.Heartbeat) > o.Stale {
		return true
	}
	if l.Host != host {
		return false
	}
	if l.PID == os.Getpid() {
		return l.Started.Before(processStart)
	}
	return !o.Alive(l.PID)
}

// AcquireLease takes the lease on run name for this process, or fails with
// ErrLeased naming the live holder; it changes nothing else. A stale lease
// is taken over. The caller must Release it; in between, Keep renews it.
func (s *Store) AcquireLease(ctx context.Context, name string, opts LeaseOptions) (*Lease, error) {
	opts = opts.withDefaults()
	host, _ := os.Hostname()
	var id [8]byte
	rand.Read(id[:])
	now := opts.now().UTC()
	l := &Lease{store: s, run: name, opts: opts, stop: make(chan struct{}), done: make(chan struct{}),
		info: LeaseInfo{Holder: hex.EncodeToString(id[:]), PID: os.Getpid(), Host: host, Started: now, Heartbeat: now}}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		if v := b.Get(leaseKey); v != nil {
			var cur LeaseInfo
			if err := json.Unmarshal(v, &cur); err == nil && !opts.stale(cur, host) {
				return fmt.Errorf("%w: %s", ErrLeased, cur)
			}
		}
		return putLease(b, l.info)
	})
	if err != nil {
		return nil, fmt.Errorf("lease run %s: %w", name, runNotFound(name, err))
	}
	return l, nil
}

func putLease(b *bolt.Bucket, l LeaseInfo) error {
	v, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return b.Put(leaseKey, v)
}

// GetLease returns the lease on run name, nil when there is none, and
// whether it is live (its holder presumed playing).
func (s *Store) GetLease(ctx context.Context, name string, opts LeaseOptions) (*LeaseInfo, bool, error) {
	var out *LeaseInfo
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		out, err = getLease(b, name)
		return err
	})
	if err != nil || out == nil {
		return nil, false, runNotFound(name, err)
	}
	return out, opts.live(*out), nil
}

// getLease decodes the lease in run name's bucket b, nil when there is
// none.
func getLease(b *bolt.Bucket, name string) (*LeaseInfo, error) {
	v := b.Get(leaseKey)
	if v == nil {
		return nil, nil
	}
	var l LeaseInfo
	if err := json.Unmarshal(v, &l); err != nil {
		return nil, badRecord("lease of run "+name, err)
	}
	return &l, nil
}

// live reports whether l's holder is presumed to play its run, as seen
// from this host: the opposite of stale.
func (o LeaseOptions) live(l LeaseInfo) bool {
	host, _ := os.Hostname()
	return !o.withDefaults().stale(l, host)
}

// Keep renews the lease every LeaseOptions.Every until Release. If the
// lease is found taken over or removed, or cannot be renewed for longer
// than it stays fresh, Keep calls lost with ErrLeaseLost and stops.
func (l *Lease) Keep(lost func(error)) {
	l.kept = true
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.opts.Every)
		defer t.Stop()
		ok := l.opts.now()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			err := l.renew()
			switch {
			case errors.Is(err, ErrLeaseLost):
			case err != nil && l.opts.now().Sub(ok) < l.opts.Stale:
				continue // e.g. the file locked a while: try again
			case err == nil:
				ok = l.opts.now()
				continue
			default:
				err = fmt.Errorf("%w: not renewed for %v: %v", ErrLeaseLost, l.opts.Stale, err)
			}
			l.err = err
			if lost != nil {
				lost(err)
			}
			return
		}
	}()
}

// renew stamps the heartbeat if the lease is still this one's.
func (l *Lease) renew() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Every)
	defer cancel()
	return l.store.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, l.run)
		if err != nil {
			return err
		}
		var cur LeaseInfo
		if v := b.Get(leaseKey); v == nil || json.Unmarshal(v, &cur) != nil || cur.Holder != l.info.Holder {
			return fmt.Errorf("%w: run %s is now held by %s", ErrLeaseLost, l.run, cur)
		}
		cur.Heartbeat = l.opts.now().UTC()
		return putLease(b, cur)
	})
}

// Release stops the heartbeat and removes the lease if it is still this
// one's. Safe to call twice.
func (l *Lease) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		close(l.stop)
		if l.kept {
			<-l.done
		}
		err = l.store.update(ctx, func(tx *bolt.Tx) error {
			b, err := runBucket(tx, l.run)
			if err != nil {
				return err
			}
			var cur LeaseInfo
			if v := b.Get(leaseKey); v != nil && json.Unmarshal(v, &cur) == nil && cur.Holder == l.info.Holder {
				return b.Delete(leaseKey)
			}
			return nil
		})
		if err != nil {
			err = fmt.Errorf("release lease on run %s: %w", l.run, err)
		}
	})
	return err
}

// ErrNotRunning: a run to cancel has already ended.
var ErrNotRunning = errors.New("run is not running")

// CancelRun marks run name cancelled without playing it (grpo runs cancel
// --db, offline): a daemon will not resume it. It refuses, changing
// nothing, when a live process holds the run's lease (cancel it there) or
// the run has ended.
func (s *Store) CancelRun(ctx context.Context, name, msg string, opts LeaseOptions) error {
	opts = opts.withDefaults()
	host, _ := os.Hostname()
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b, err := runBucket(tx, name)
		if err != nil {
			return err
		}
		if v := b.Get(leaseKey); v != nil {
			var cur LeaseInfo
			if err := json.Unmarshal(v, &cur); err == nil && !opts.stale(cur, host) {
				return fmt.Errorf("%w: %s; cancel it there (daemon: POST /api/v1/runs/%s/cancel; CLI: Ctrl-C)", ErrLeased, cur, url.PathEscape(name))
			}
		}
		run, err := getRun(b, name)
		if err != nil {
			return err
		}
		if run.State != StateRunning {
			return fmt.Errorf("%w: it is %s", ErrNotRunning, run.State)
		}
		run.State, run.Error, run.Updated = StateCancelled, msg, time.Now().UTC()
		if err := b.Delete(leaseKey); err != nil {
			return err
		}
		return putRun(b, run)
	})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", name, runNotFound(name, err))
	}
	return nil
}
