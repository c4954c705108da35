package checkpoint

import (
	"errors"
	"fmt"
	"regexp"
)

// RunNameRule says which run names are accepted. A run's name becomes part
// of adapter names, trainer job ids and the daemon's directory names, and
// is passed on command lines, so it is short and made of path-safe
// segments: each starts with a letter or digit (never "." or ".."), and
// segments are joined by '/' (experiments name runs <experiment>/<arm>/<seed>;
// adapter names replace the '/' with '.').
const RunNameRule = "1 to 64 of A-Z a-z 0-9 . _ - in segments joined by '/' (e.g. exp/arm/1), each starting with a letter or digit"

var runNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`)

// ErrRunName is the error ValidateRunName wraps.
var ErrRunName = errors.New("run name not accepted")

// ValidateRunName reports whether name follows RunNameRule, the one rule for
// run names: the config, the daemon and the store all apply it.
func ValidateRunName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: it is empty", ErrRunName)
	}
	if len(name) > 64 || !runNamePattern.MatchString(name) {
		return fmt.Errorf("%w: %.70q; use %s", ErrRunName, name, RunNameRule)
	}
	return nil
}
