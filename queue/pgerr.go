package queue

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports an error that says the database cannot be reached or is going
// away (refused or broken connections, an admin or crash shutdown, a server not accepting
// connections yet), rather than anything about the request: the API answers 503 with
// Retry-After, and the outage is logged once.
func IsUnavailable(err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	switch {
	case err == nil:
		return false
	case errors.As(err, &pgErr):
		// Class 08: connection exception; 57P01-57P03: shutdown, cannot connect now.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return pgconn.SafeToRetry(err)
}

// IsValueRejected reports a value the database refused to store: a NUL byte or bytes
// that are not UTF-8 in text (22P05, 22021) or a number out of range (22003). Handlers
// check these first and name the field; this keeps whatever slips past a 4xx.
func IsValueRejected(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "22P05", "22021", "22003":
		return true
	}
	return false
}
