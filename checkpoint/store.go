// Package checkpoint keeps every step of every run in one bbolt file and
// picks the step to keep (DESIGN §7).
//
// # Layout
//
//	runs                      bucket
//	  <run name>              bucket, one per run
//	    run                   key: Run as JSON
//	    inflight              key: InFlight as JSON, absent when no job is in flight
//	    summary               key: the run's summary (ListRuns), written with every step and state;
//	                          absent in stores written before it, then built once when listed
//	    steps                 bucket: big-endian uint64 step -> Step as JSON
//	    evaluations           bucket: big-endian uint64 step -> Evaluation as JSON
//	    tests                 bucket, absent until a checkpoint is measured on a held-out split
//	      <split>             bucket, e.g. test: big-endian uint64 step -> TestEvaluation as JSON
//
// Big-endian keys make cursor order numeric order.
//
// # Sharing the file
//
// bbolt lets one process at a time open a file for writing. So that
// `grpo best` or `grpo runs show` work in a second terminal while a run
// trains, a Store holds the file only while it works: every method opens it
// (read methods with a shared, read-only lock), runs one transaction and
// closes it. Waiting for the lock is bounded by Options.Timeout; a file that
// cannot be opened yields an error naming it and saying why, matched by
// ErrNoDatabase, ErrLocked or ErrNotDatabase.
package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket and key names.
var (
	runsBucket        = []byte("runs")
	stepsBucket       = []byte("steps")
	evaluationsBucket = []byte("evaluations")
	runKey            = []byte("run")
	inflightKey       = []byte("inflight")
)

// Defaults for Options.
const (
	DefaultTimeout = 10 * time.Second
	DefaultMode    = fs.FileMode(0o600)
)

// Errors of the database file. An error returned when the file cannot be
// opened names the file and matches one of these, or the OS error.
var (
	// ErrNoDatabase: a read found no database file (reads never create it).
	ErrNoDatabase = errors.New("database does not exist")
	// ErrLocked: another process held the file past Options.Timeout.
	ErrLocked = errors.New("database is locked by another process")
	// ErrNotDatabase: the file is not a bbolt database, or is corrupt.
	ErrNotDatabase = errors.New("not a bbolt database")
)

// Errors of runs and steps, usable with errors.Is.
var (
	ErrRunNotFound    = errors.New("no such run")
	ErrRunExists      = errors.New("run already exists")
	ErrStepExists     = errors.New("step already committed")
	ErrStepOutOfOrder = errors.New("step out of order")
)

// Options tune a Store.
type Options struct {
	// Timeout bounds the wait for the file lock; 0 means DefaultTimeout.
	Timeout time.Duration
	// Mode is the permission of a file the Store creates; 0 means DefaultMode.
	Mode fs.FileMode
}

// Store keeps runs, steps, evaluations and in-flight jobs in a bbolt file.
// It is safe for concurrent use; Stores on the same file in one process
// share a lock, so they never contend for the file lock among themselves.
type Store struct {
	path string
	opts Options
}

// New returns a Store on the file at path. It does no I/O: the file is
// opened by each method and created by the first write.
func New(path string, opts Options) *Store {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Mode == 0 {
		opts.Mode = DefaultMode
	}
	return &Store{path: path, opts: opts}
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.path }

// fileLocks holds one lock per database file in this process: flock locks
// taken by two opens of one file conflict even within a process.
var fileLocks sync.Map // absolute path -> *sync.RWMutex

func fileLock(path string) *sync.RWMutex {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	mu, _ := fileLocks.LoadOrStore(path, new(sync.RWMutex))
	return mu.(*sync.RWMutex)
}

// view runs fn in a read transaction on the file opened read-only. Values
// read in fn must be copied (json.Unmarshal copies) before it returns.
func (s *Store) view(ctx context.Context, fn func(*bolt.Tx) error) (err error) {
	mu := fileLock(s.path)
	mu.RLock()
	defer mu.RUnlock()
	defer s.recoverCorrupt(&err)
	// A damaged page can point outside the file's mapping: make that fault
	// a panic that recoverCorrupt turns into an error, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	db, err := s.open(ctx, true)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close database %s: %w", s.path, cerr)
		}
	}()
	return s.checkRecords(db.View(fn))
}

// update runs fn in a read-write transaction, creating the file and the
// runs bucket if needed. The commit is fsynced.
func (s *Store) update(ctx context.Context, fn func(*bolt.Tx) error) (err error) {
	mu := fileLock(s.path)
	mu.Lock()
	defer mu.Unlock()
	defer s.recoverCorrupt(&err)
	// A damaged page can point outside the file's mapping: make that fault
	// a panic that recoverCorrupt turns into an error, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))

	db, err := s.open(ctx, false)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close database %s: %w", s.path, cerr)
		}
	}()
	return s.checkRecords(db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(runsBucket); err != nil {
			return fmt.Errorf("create bucket %s: %w", runsBucket, err)
		}
		return fn(tx)
	}))
}

// open opens the file, waiting for its lock no longer than the Store's
// timeout or ctx's deadline.
func (s *Store) open(ctx context.Context, readOnly bool) (*bolt.DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open database %s: %w", s.path, err)
	}
	timeout := s.opts.Timeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(deadline)), time.Millisecond)
	}

	fi, err := os.Stat(s.path)
	switch {
	case err == nil && fi.IsDir():
		return nil, &openError{msg: fmt.Sprintf("database %s is a directory", s.path), errs: []error{ErrNotDatabase}}
	case err == nil && fi.Size() == 0 && readOnly:
		// A write would initialise an empty file; a read cannot.
		return nil, &openError{msg: fmt.Sprintf("database %s is an empty file, not a bbolt database", s.path), errs: []error{ErrNotDatabase}}
	case err != nil && (readOnly || !errors.Is(err, fs.ErrNotExist)):
		return nil, s.openError(ctx, err, readOnly, timeout)
	}

	db, err := bolt.Open(s.path, s.opts.Mode, &bolt.Options{Timeout: timeout, ReadOnly: readOnly})
	if err != nil {
		return nil, s.openError(ctx, err, readOnly, timeout)
	}
	return db, nil
}

// openError says which file could not be opened and why.
func (s *Store) openError(ctx context.Context, err error, readOnly bool, timeout time.Duration) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		errs := []error{ErrLocked, err}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
		}
		return &openError{
			msg:  fmt.Sprintf("database %s is locked by another process (gave up after %s)", s.path, timeout.Round(time.Millisecond)),
			errs: errs,
		}
	case errors.Is(err, fs.ErrNotExist) && !readOnly:
		return &openError{msg: fmt.Sprintf("create database %s: directory %s does not exist", s.path, filepath.Dir(s.path)), errs: []error{err}}
	case errors.Is(err, fs.ErrNotExist):
		return &openError{msg: fmt.Sprintf("database %s does not exist", s.path), errs: []error{ErrNoDatabase, err}}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		return &openError{msg: fmt.Sprintf("database %s is not a bbolt database or is corrupt: %v; if it is grpo's store, %s", s.path, err, recovery(s.path)), errs: []error{ErrNotDatabase, err}}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// Name the file once: the PathError would repeat it.
		return &openError{msg: fmt.Sprintf("open database %s: %v", s.path, pe.Err), errs: []error{err}}
	}
	return &openError{msg: fmt.Sprintf("open database %s: %v", s.path, err), errs: []error{err}}
}

// openError is an error opening the database file. Its message names the
// file; errors.Is matches both the package sentinel and the cause.
type openError struct {
	msg  string
	errs []error
}

var _ error = (*openError)(nil)

func (e *openError) Error() string   { return e.msg }
func (e *openError) Unwrap() []error { return e.errs }

// runBucket returns the bucket of run name, or an error matching
// ErrRunNotFound.
func runBucket(tx *bolt.Tx, name string) (*bolt.Bucket, error) {
	runs := tx.Bucket(runsBucket)
	if runs == nil || name == "" {
		return nil, fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	b := runs.Bucket([]byte(name))
	if b == nil {
		return nil, fmt.Errorf("run %s: %w", name, ErrRunNotFound)
	}
	return b, nil
}

// runNotFound turns a missing database file into a missing run, keeping
// both in the error, for methods about one run.
func runNotFound(name string, err error) error {
	if errors.Is(err, ErrNoDatabase) {
		return fmt.Errorf("run %s: %w: %w", name, ErrRunNotFound, err)
	}
	return err
}

// itob encodes a step number as a big-endian key.
func itob(v int) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(v))
	return b
}

// btoi decodes a big-endian key.
func btoi(b []byte) int {
	return int(binary.BigEndian.Uint64(b))
}
