package inference

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/grpo-dev/grpo/internal/httpx"
	"github.com/grpo-dev/grpo/internal/quote"
)

// Sentinel errors of adapter management, matched through *AdminError.
var (
	// ErrAdapterExists: the server already has an adapter of that name
	// (vLLM answers 400 unless load_inplace is set).
	ErrAdapterExists = errors.New("adapter already loaded")
	// ErrAdapterNotFound: the server has no adapter of that name.
	ErrAdapterNotFound = errors.New("adapter not found")
	// ErrAdapterPathNotFound: a load found nothing at the adapter's path
	// (vLLM's 404 NotFoundError, or older vLLM's 400 "No adapter found");
	// on a shared filesystem the files may not have appeared yet.
	ErrAdapterPathNotFound = errors.New("adapter path not found")
)

// AdminError is a non-success answer of an inference server's admin API.
type AdminError struct {
	Method     string
	URL        string
	StatusCode int
	Type       string // the server's error type, e.g. vLLM's "BadRequestError"; may be empty
	Message    string // the server's message, or a quoted prefix of the body
	Err        error  // ErrAdapterExists, ErrAdapterNotFound or nil
}

// Error implements error, worded as every other status error of grpo's
// HTTP clients.
func (e *AdminError) Error() string {
	return (&httpx.StatusError{Method: e.Method, URL: e.URL, StatusCode: e.StatusCode, Type: e.Type, Message: e.Message}).Error()
}

// Unwrap exposes the sentinel the answer was recognised as.
func (e *AdminError) Unwrap() error { return e.Err }

var _ error = (*AdminError)(nil)

// adminError describes a non-success answer; classify, if not nil, picks
// the sentinel it matches.
func (a answer) adminError(classify func(status int, se httpx.ServerError) error) *AdminError {
	e := &AdminError{Method: a.method, URL: a.url, StatusCode: a.status, Type: a.server.Type, Message: a.server.Message}
	if classify != nil {
		e.Err = classify(a.status, a.server)
	}
	if a.status == http.StatusNotFound && !a.server.OpenAI && strings.Contains(a.url, "_lora_adapter") {
		// The route itself is missing, not the adapter.
		e.Message += " (no runtime LoRA API here: start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
	}
	return e
}

// classifyLoad recognises vLLM's "The lora adapter 'x' has already been
// loaded" answer, and its answers for a path with no adapter: 404
// NotFoundError in current vLLM, 400 "Loading lora x failed: No adapter
// found for ..." in older ones. A 404 that is not vLLM's error body is a
// missing route.
func classifyLoad(status int, se httpx.ServerError) error {
	msg := strings.ToLower(se.Message)
	switch {
	case !se.OpenAI:
		return nil
	case status == http.StatusBadRequest && strings.Contains(msg, "already"):
		return ErrAdapterExists
	case status == http.StatusNotFound || se.Type == "NotFoundError" ||
		(status == http.StatusBadRequest && strings.Contains(msg, "no adapter found")):
		return ErrAdapterPathNotFound
	}
	return nil
}

// classifyUnload recognises vLLM's "The lora adapter 'x' cannot be found"
// answer: 404 NotFoundError in current vLLM, 400 in older ones. A 404 that
// is not vLLM's error body is a missing route, not a missing adapter.
func classifyUnload(status int, se httpx.ServerError) error {
	if !se.OpenAI {
		return nil
	}
	msg := strings.ToLower(se.Message)
	if status == http.StatusNotFound || se.Type == "NotFoundError" ||
		(status == http.StatusBadRequest && (strings.Contains(msg, "cannot be found") || strings.Contains(msg, "not found"))) {
		return ErrAdapterNotFound
	}
	return nil
}

// notModelList explains an answer to GET {base}/models that is not an
// OpenAI model list.
func (a answer) notModelList(base string) error {
	hint := ""
	switch {
	case a.status == http.StatusUnauthorized || a.status == http.StatusForbidden:
		hint = " — does the server need an API key?"
	case !strings.HasSuffix(base, "/v1"):
		hint = " — does the URL end in /v1?"
	}
	body := "an empty body"
	if len(bytes.TrimSpace(a.body)) > 0 {
		body = quote.Body(a.body)
	}
	return fmt.Errorf("%s answered %d %s; expected an OpenAI-compatible /v1/models JSON list%s (got %s)",
		a.url, a.status, contentTypeOrNone(a.contentType), hint, body)
}

func contentTypeOrNone(ct string) string {
	if ct == "" {
		return "with no content type"
	}
	return ct
}
