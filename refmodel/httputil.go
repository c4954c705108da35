package refmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/grpo-dev/grpo/inference"
)

// vLLM's error types by status code.
func errorType(code int) string {
	switch code {
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowedError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLargeError"
	default:
		return "InternalServerError"
	}
}

// writeVLLMError writes vLLM's error body. param names the offending
// request field, or is empty.
func writeVLLMError(w http.ResponseWriter, code int, param, msg string) {
	body := inference.ErrorBody{Error: inference.ErrorDetail{Message: msg, Type: errorType(code), Code: code}}
	if param != "" {
		body.Error.Param = &param
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	w.Write([]byte(text))
}

// requestError is a bad request: the field at fault and what is wrong.
type requestError struct {
	param string
	msg   string
}

func (e *requestError) Error() string { return e.msg }

func badField(param, format string, args ...any) *requestError {
	return &requestError{param: param, msg: param + ": " + fmt.Sprintf(format, args...)}
}

// decodeError turns a JSON decoding error into a request error that names
// the field when the decoder knows it.
func decodeError(err error) *requestError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return badField(te.Field, "expected %s, got JSON %s", te.Type, te.Value)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &requestError{msg: fmt.Sprintf("request body larger than %d bytes", mbe.Limit)}
	}
	return &requestError{msg: "malformed JSON body: " + err.Error()}
}
