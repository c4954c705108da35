package httpx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/grpo-dev/grpo/internal/quote"
)

// StatusError is an answer with a status outside 2xx.
type StatusError struct {
	Method     string
	URL        string
	StatusCode int
	// Message is what the server said (ParseErrorBody), or a quoted
	// prefix of the body; Type is the server's error type, if it named one.
	Message string
	Type    string
	// OpenAI is set when the body is an OpenAI/vLLM error object, so a
	// caller can tell a server's "not found" from a missing route.
	OpenAI      bool
	ContentType string
	Body        []byte        // the answer as read, at most the client's MaxBody
	RetryAfter  time.Duration // the Retry-After header, 0 if absent
}

// Error implements error.
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", e.Method, e.URL, e.StatusCode)
	if s := http.StatusText(e.StatusCode); s != "" {
		b.WriteString(" " + s)
	}
	if e.Type != "" {
		b.WriteString(": " + e.Type)
	}
	b.WriteString(": " + e.Message)
	return b.String()
}

// TimeoutError is an attempt that outlived the client's per-attempt
// timeout while the caller's context was still alive.
type TimeoutError struct{ After time.Duration }

func (e *TimeoutError) Error() string { return fmt.Sprintf("no answer within %s", e.After) }

// GarbageError is a 2xx answer the caller could not use: not the JSON it
// expects, or larger than the client's body cap. Body is the start of the
// answer, quoted, or a note of its size.
type GarbageError struct {
	Body string
	Err  error // why it was rejected, if the caller said
}

func (e *GarbageError) Error() string {
	if e.Err != nil {
		return e.Err.Error() + ": " + e.Body
	}
	return "unusable answer: " + e.Body
}

func (e *GarbageError) Unwrap() error { return e.Err }

// ErrTooLarge is wrapped by the GarbageError of an answer over the cap.
var ErrTooLarge = errors.New("answer larger than the body cap")

var (
	_ error = (*StatusError)(nil)
	_ error = (*TimeoutError)(nil)
	_ error = (*GarbageError)(nil)
)

// IsTransient reports whether err is worth another attempt: 429; a 5xx
// other than 501 Not Implemented; an attempt timeout; a refused, reset or
// dropped connection or another network failure. A cancelled or expired
// caller context is not transient, nor is a GarbageError (a request opts
// in to retrying those with RetryGarbage).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		c := se.StatusCode
		return c == http.StatusTooManyRequests || (c >= 500 && c != http.StatusNotImplemented)
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's deadline: attempts' own are TimeoutErrors
	}
	// *url.Error is a net.Error whatever its cause: judge the cause, so
	// that a bad URL or certificate is not retried.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	// A kept-alive connection the server closed as the request went out:
	// net/http retries it itself only for idempotent methods.
	if err != nil && strings.Contains(err.Error(), "http: server closed idle connection") {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// ServerError is what a server said in an error body.
type ServerError struct {
	Message string
	Type    string
	OpenAI  bool // an OpenAI/vLLM error object, nested or flat
}

// ParseErrorBody reads the error bodies grpo's peers send: OpenAI's and
// vLLM's {"error":{"message","type"}}, older vLLM's flat
// {"object":"error","message","type"}, {"error":"..."}, FastAPI's
// {"detail":"..."} or {"detail":[{"msg":...}]}, and {"message":"..."}.
// Anything else — plain text, HTML, other JSON — is quoted (quote.Body);
// an empty body is "empty body".
func ParseErrorBody(body []byte) ServerError {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		var obj struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		var items []struct {
			Msg string          `json:"msg"`
			Loc json.RawMessage `json:"loc"`
		}
		switch {
		case json.Unmarshal(v.Error, &obj) == nil && obj.Message != "":
			return ServerError{Message: obj.Message, Type: obj.Type, OpenAI: true}
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return ServerError{Message: s}
		case v.Message != "":
			return ServerError{Message: v.Message, Type: v.Type, OpenAI: true}
		case json.Unmarshal(v.Detail, &s) == nil && s != "":
			return ServerError{Message: s}
		case json.Unmarshal(v.Detail, &items) == nil:
			var msgs []string
			for _, it := range items {
				if it.Msg == "" {
					continue
				}
				m := it.Msg
				if len(it.Loc) > 0 {
					m = string(it.Loc) + ": " + m
				}
				msgs = append(msgs, m)
			}
			if len(msgs) > 0 {
				return ServerError{Message: strings.Join(msgs, "; ")}
			}
		}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return ServerError{Message: "empty body"}
	}
	return ServerError{Message: quote.Body(body)}
}

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP
// date (relative to now). Absent, malformed or past values are 0.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(max(n, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
