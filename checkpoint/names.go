package checkpoint

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// RunNameRule says which run names are accepted. A run's name becomes part
// of adapter names, trainer job ids and the daemon's directory names, and
// is passed on command lines, so it is short and made of path-safe
// segments: each starts with a letter or digit (never "." or ".."), and
// segments are joined by '/' (experiments name runs <experiment>/<arm>/<seed>;
// adapter names replace the '/' with '.').
const RunNameRule = "1 to 64 of A-Z a-z 0-9 . _ - in segments joined by '/' (e.g. exp/arm/1), each starting with a letter or digit and none \"jobs\" or \"adapters\""

// reservedSegments may not be a segment of a run name: a run's data
// directory (the daemon's <data-dir>/<run>, grpo run's <db>.data) holds
// the embedded backend's jobs/ and adapters/, so a run named a/jobs, or
// jobs beside a grpo run's store, would share another run's files (whose
// trainer cleaned them up as half-created jobs).
var reservedSegments = []string{"jobs", "adapters"}

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
	for _, seg := range strings.Split(name, "/") {
		if slices.Contains(reservedSegments, seg) {
			return fmt.Errorf("%w: %q: %q is the name of a directory in a run's data directory (the embedded backend's); use %s", ErrRunName, name, seg, RunNameRule)
		}
	}
	return nil
}
