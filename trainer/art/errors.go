package art

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Sentinel errors. Each typed error below matches one of them with
// errors.Is.
var (
	// ErrUnsupportedVersion matches a *VersionError: the server is not an
	// ART backend server of a supported version.
	ErrUnsupportedVersion = errors.New("unsupported ART server version")
	// ErrUnsupported is returned by calls the detected server version does
	// not offer (for example /_log, removed in ART 0.5.9).
	ErrUnsupported = errors.New("not offered by this ART server version")
	// ErrCannotKeep matches a *KeepError: the server's checkpoint deletion
	// cannot be told to keep the steps asked for, so nothing was deleted.
	ErrCannotKeep = errors.New("ART cannot keep these checkpoints")
	// ErrStreamBroken matches a *StreamError: the training stream had a line
	// that is not JSON, or ended before the gradient steps it announced.
	ErrStreamBroken = errors.New("ART training stream broken")
)

// VersionError reports a server whose /openapi.json does not describe a
// supported ART backend server.
type VersionError struct {
	URL   string
	Found string // what the server exposes, in a few words
}

// Error implements error.
func (e *VersionError) Error() string {
	return fmt.Sprintf("ART server %s: %s; supported: the `art run` backend server of openpipe-art %s", e.URL, e.Found, SupportedRange)
}

// Is matches ErrUnsupportedVersion.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// StatusError is a non-2xx answer of the ART server. Detail is FastAPI's
// "detail" (a string, or the validation errors of a 422) or a quoted prefix
// of the body.
type StatusError struct {
	Method     string
	URL        string
	StatusCode int
	Detail     string
}

// Error implements error.
func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode), e.Detail)
}

// StreamError reports a broken /_train_model stream: a line that is not a
// JSON object, or an end before the announced number of gradient steps.
type StreamError struct {
	Line int // 1-based line number; 0 when the stream ended early
	Msg  string
	Err  error // the underlying decode or read error, if any
}

// Error implements error.
func (e *StreamError) Error() string {
	var b strings.Builder
	b.WriteString("ART training stream")
	if e.Line > 0 {
		fmt.Fprintf(&b, " line %d", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *StreamError) Unwrap() error { return e.Err }

// Is matches ErrStreamBroken.
func (e *StreamError) Is(target error) bool { return target == ErrStreamBroken }

// KeepError reports a deletion that was not sent because the server would
// have deleted a step the caller wants kept.
type KeepError struct {
	Keep   []int // the steps that would have been deleted
	Latest int   // ART's latest step, which ART always keeps
	Reason string
}

// Error implements error.
func (e *KeepError) Error() string {
	return fmt.Sprintf("ART checkpoint deletion not sent: steps %v would be deleted (ART keeps only step %d and its own best): %s", e.Keep, e.Latest, e.Reason)
}

// Is matches ErrCannotKeep.
func (e *KeepError) Is(target error) bool { return target == ErrCannotKeep }
