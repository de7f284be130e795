package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Error codes, shared with the client.
const (
	codeBadRequest       = client.CodeBadRequest
	codeUnauthorized     = client.CodeUnauthorized
	codeForbidden        = client.CodeForbidden
	codeNotFound         = client.CodeNotFound
	codeMethodNotAllowed = client.CodeMethodNotAllowed
	codeLeaseLost        = client.CodeLeaseLost
	codeConflict         = client.CodeConflict
	codeTooLarge         = client.CodeTooLarge
	codeBodyTimeout      = client.CodeBodyTimeout
	codeInvalidPlan      = client.CodeInvalidPlan
	codeInternal         = client.CodeInternal
	codeUnavailable      = client.CodeUnavailable
)

// httpError is an answer decided by a handler: its message is safe to show.
type httpError struct {
	status  int
	code    string
	message string
}

func (e *httpError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) *httpError {
	return &httpError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// statusClientClosed is recorded when the caller went away before the answer.
const statusClientClosed = 499

// writeError maps err to a status and a JSON error body. This is the one place where
// errors become HTTP: store sentinels map to 4xx with their (safe) text, anything else is
// a 500 whose cause is logged and never sent.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		he *httpError
		ve *plan.ValidationError
	)
	status, code, msg := http.StatusInternalServerError, codeInternal, "internal error"
	switch {
	case errors.As(err, &he):
		status, code, msg = he.status, he.code, he.message
	case errors.As(err, &ve):
		status, code, msg = http.StatusUnprocessableEntity, codeInvalidPlan, ve.Error()
	case errors.Is(err, queue.ErrLeaseLost):
		status, code, msg = http.StatusConflict, codeLeaseLost, sentence(err)
	case errors.Is(err, queue.ErrNotFound):
		status, code, msg = http.StatusNotFound, codeNotFound, sentence(err)
	case errors.Is(err, queue.ErrConflict):
		status, code, msg = http.StatusConflict, codeConflict, sentence(err)
	case errors.Is(err, queue.ErrInvalid):
		status, code, msg = http.StatusBadRequest, codeBadRequest, sentence(err)
	case errors.Is(err, queue.ErrForbidden):
		status, code, msg = http.StatusForbidden, codeForbidden, sentence(err)
	case errors.Is(err, queue.ErrUnauthorized):
		status, code, msg = http.StatusUnauthorized, codeUnauthorized, "The token is unknown, revoked or expired."
	case r.Context().Err() != nil:
		// The caller went away (whatever error that caused below); nobody is left to answer.
		setStatus(r, statusClientClosed)
		return
	case queue.IsValueRejected(err):
		// A value a handler should have refused already: still the caller's, not a 500.
		status, code, msg = http.StatusBadRequest, codeBadRequest, "A value in the request cannot be stored: text must be UTF-8 without NUL bytes, amounts less than 100000000 USD."
		s.log.WarnContext(r.Context(), "the database refused a value", "method", r.Method, "route", routePattern(r), "error", err)
	case queue.IsUnavailable(err):
		status, code, msg = http.StatusServiceUnavailable, codeUnavailable, "The database is unavailable; try again shortly."
		w.Header().Set("Retry-After", retryAfterSeconds)
		s.dbOutage(r.Context(), err)
	default:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "route", routePattern(r), "error", err)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="whilly"`)
	}
	writeJSON(w, status, client.ErrorBody{Error: code, Message: msg})
}

// retryAfterSeconds is the Retry-After of a 503 for a database outage.
const retryAfterSeconds = "5"

// dbOutage logs a database outage once: the first request that meets it logs an ERROR,
// the others of the same outage nothing; dbRecovered ends the outage.
func (s *Server) dbOutage(ctx context.Context, err error) {
	if s.dbDown.CompareAndSwap(false, true) {
		s.log.ErrorContext(ctx, "database unavailable; answering 503 until it is back", "error", err)
	}
}

// dbRecovered ends an outage that dbOutage began, after a request answered below 500.
func (s *Server) dbRecovered(ctx context.Context) {
	if s.dbDown.CompareAndSwap(true, false) {
		s.log.InfoContext(ctx, "database reachable again")
	}
}

// sentence turns a store error into one plain sentence: "Task a of plan b: not found."
func sentence(err error) string {
	m := queue.WithoutClass(err.Error())
	if m == "" {
		return "The request failed."
	}
	m = strings.ToUpper(m[:1]) + m[1:]
	if !strings.HasSuffix(m, ".") {
		m += "."
	}
	return m
}

// answers holds the buffers answers are encoded into. Encoding into a reused buffer,
// newline included, spares Marshal's copy of the answer and the copy that appended the
// newline (BenchmarkWriteComplete: 15-25% less CPU, half the bytes allocated).
var answers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledAnswer bounds the buffers kept for reuse, so that one large answer (a page of
// tasks) does not stay in memory.
const maxPooledAnswer = 64 << 10

func writeJSON(w http.ResponseWriter, status int, v any) {
	buf := answers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledAnswer {
			buf.Reset()
			answers.Put(buf)
		}
	}()
	// Encode writes what Marshal returns, then a newline.
	if err := json.NewEncoder(buf).Encode(v); err != nil { // a programming error: every answer is a plain struct
		status = http.StatusInternalServerError
		buf.Reset()
		_ = json.NewEncoder(buf).Encode(client.ErrorBody{Error: codeInternal, Message: "internal error"}) // two strings always encode
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// With its length known, the answer goes out in one write, not chunked.
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the status is sent; a write error means the caller left
}

// decode reads one JSON object from the body into v: at most limit bytes (413 beyond),
// no unknown fields, nothing after it. Every failure is an *httpError.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return decodeError(err, limit)
	}
	// encoding/json would turn bytes that are not UTF-8 into U+FFFD without a word.
	if !utf8.Valid(data) {
		return errorf(http.StatusBadRequest, codeBadRequest, "The body must be valid UTF-8; it holds bytes that are not.")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err, limit)
		}
		return errorf(http.StatusBadRequest, codeBadRequest, "The body must hold a single JSON object.")
	}
	return nil
}

// errBodyTimeout answers a request whose body did not arrive before its deadline.
func errBodyTimeout() *httpError {
	return errorf(http.StatusRequestTimeout, codeBodyTimeout, "The body did not arrive in time; send it again.")
}

func decodeError(err error, limit int64) *httpError {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return errorf(http.StatusRequestEntityTooLarge, codeTooLarge, "The body is larger than %d bytes.", limit)
	case IsBodyTimeout(err):
		return errBodyTimeout()
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, codeBadRequest, "The body is empty; a JSON object is expected.")
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, codeBadRequest, "The body is not valid JSON.")
	case errors.As(err, &te):
		if te.Field == "" {
			return errorf(http.StatusBadRequest, codeBadRequest, "The body must be a JSON object.")
		}
		return errorf(http.StatusBadRequest, codeBadRequest, "Field %s must be a JSON %s.", te.Field, jsonKind(te.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return errorf(http.StatusBadRequest, codeBadRequest, "The body has an unknown field %s.", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		// An UnmarshalJSON error of a field type, such as an amount that is negative.
		return errorf(http.StatusBadRequest, codeBadRequest, "The body is invalid: %s.", strings.TrimSuffix(err.Error(), "."))
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "slice", "array":
		return "array"
	case "struct", "map":
		return "object"
	default:
		return "number"
	}
}
