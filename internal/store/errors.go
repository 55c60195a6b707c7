package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Errors a caller tells apart with errors.Is.
var (
	// ErrNotFound: no such tenant, key or ledger.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: the tenant or key (id or hash) is already there.
	ErrExists = errors.New("store: already exists")
	// ErrInsufficientBalance: the hold does not fit in balance − reserved.
	// Final for the request: the gateway answers 402 insufficient_balance.
	ErrInsufficientBalance = errors.New("store: insufficient balance")
	// ErrInvalid: an argument the store refuses (an empty name, an amount
	// out of range, a hash that is not 64 hex digits).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrUnavailable: the database could not be reached or did not answer
	// in time. The gateway answers 503 for charged requests; the call may
	// be retried (Hold, Settle, Release are idempotent per request id).
	ErrUnavailable = errors.New("store unavailable")
	// ErrInconsistent: Verify found balances that disagree with the ledger
	// or reservations that disagree with the holds.
	ErrInconsistent = errors.New("store: inconsistent")
)

// unavailableError marks err as ErrUnavailable and keeps it inspectable.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return "store unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// classify is the one place that decides whether a database error means the
// store is unavailable (the connection failed, the server is shutting down
// or starting, the file is locked past busy_timeout, the disk is full, the
// call timed out) and wraps it so; other errors are returned as they are.
// A canceled context is the caller's doing, not an outage.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, context.Canceled) {
		return err
	}
	if unavailable(err) {
		return &unavailableError{err}
	}
	return err
}

// staleConn reports whether err says the connection a call used was
// already dead: the server ended it (57P01 admin_shutdown, 57P02
// crash_shutdown, an 08 connection exception) or it was found closed. The
// statement then did not run, or ran in a transaction the server rolled
// back.
func staleConn(err error) bool {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return false // a new connection that failed: the server is down
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "57P01" || pgErr.Code == "57P02" || strings.HasPrefix(pgErr.Code, "08")
	}
	return pgconn.SafeToRetry(err)
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), // connection exception
			strings.HasPrefix(pgErr.Code, "53"), // insufficient resources: disk full, too many connections
			pgErr.Code == "57P01",               // admin_shutdown
			pgErr.Code == "57P02",               // crash_shutdown
			pgErr.Code == "57P03":               // cannot_connect_now: starting up or shutting down
			return true
		}
		return false
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		// pgx's word that the query never reached the server (a closed
		// connection), or a network timeout.
		return true
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		switch liteErr.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL:
			return true
		}
	}
	return false
}

// foreignKeyViolation reports a row that names a tenant that is not there.
func foreignKeyViolation(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "23503"
	}
	var liteErr *sqlite.Error
	if errors.As(err, &liteErr) {
		return liteErr.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
	}
	return false
}
