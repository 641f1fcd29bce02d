package lookup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

func writeError(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	writeBody(w, status, append(b, '\n'))
}

// errUnavailable marks an answer that a failed store step may have held:
// the request is answered 503 (retry), never a miss, because the data may
// exist in the store that could not be read.
type errUnavailable struct{ cause error }

func (e *errUnavailable) Error() string {
	return "no store could answer (a store step failed, so this is not a miss): " + e.cause.Error()
}

func (e *errUnavailable) Unwrap() error { return e.cause }

// writeErr maps an error to its status: 400 for bad requests, 413 for an
// oversized body, 503 when a failed store left keys unanswered, 504 for
// the request timeout, else 500.
func writeErr(ctx context.Context, w http.ResponseWriter, err error) {
	var br *badRequest
	var tooBig *http.MaxBytesError
	var unavail *errUnavailable
	switch {
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, br.msg)
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", tooBig.Limit))
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		writeError(w, http.StatusGatewayTimeout, "request timed out")
	case errors.As(err, &unavail):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, unavail.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}
