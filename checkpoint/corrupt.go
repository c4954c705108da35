package checkpoint

import (
	"errors"
	"fmt"
)

// ErrCorrupt: the file opened, but a page or a record in it cannot be read.
var ErrCorrupt = errors.New("database is corrupt")

// recovery says what to do with a corrupt file.
func recovery(path string) string {
	return fmt.Sprintf("restore a copy of %s, or inspect it with `bbolt check %s` (go install go.etcd.io/bbolt/cmd/bbolt@latest)", path, path)
}

// corrupt is the error for a corrupt file: it names the file, what could not
// be read, and the recovery, and matches ErrCorrupt.
func corrupt(path, what string, cause error) error {
	return &openError{
		msg:  fmt.Sprintf("database %s is corrupt: %s: %v; %s", path, what, cause, recovery(path)),
		errs: []error{ErrCorrupt, cause},
	}
}

// recordError is a record that does not decode, found inside a
// transaction, which does not know the file's path: view and update turn
// it into corrupt.
type recordError struct {
	what string
	err  error
}

func (e *recordError) Error() string { return e.what + ": " + e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// badRecord returns a recordError for what.
func badRecord(what string, err error) error { return &recordError{what: what, err: err} }

// checkRecords turns a recordError from a transaction into corrupt.
func (s *Store) checkRecords(err error) error {
	var re *recordError
	if errors.As(err, &re) {
		return corrupt(s.path, re.what, re.err)
	}
	return err
}

// recoverCorrupt turns a panic of bbolt reading a damaged page into an
// error naming the file (deferred by view and update).
func (s *Store) recoverCorrupt(err *error) {
	if p := recover(); p != nil {
		*err = corrupt(s.path, "reading its pages", fmt.Errorf("%v", p))
	}
}
