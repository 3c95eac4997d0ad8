// Package dbfault tells a database outage from a refused request: whether
// the error of a database call means that PostgreSQL could not be reached
// or went away (retry later; an HTTP 503), rather than that it refused
// what was asked (a bug or bad input).
package dbfault

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// unavailableCodes are the SQLSTATEs, outside class 08 (connection
// exception), that mean the session or the server is going away or cannot
// serve writes now, not that the statement was wrong.
var unavailableCodes = map[string]bool{
	"57P01": true, // admin_shutdown: a fast shutdown, or the session was terminated
	"57P02": true, // crash_shutdown: another backend crashed and the server restarts
	"57P03": true, // cannot_connect_now: starting up, shutting down, in recovery
	"57P05": true, // idle_session_timeout
	"53300": true, // too_many_connections
	"25006": true, // read_only_sql_transaction: a write on a standby (after a failover, before DNS follows)
}

// ErrUnconfirmed is wrapped by errors of writes and reads whose commit the
// database did not confirm as durable: its wait for the synchronous
// standbys was cancelled, so the commit may exist on this server only,
// and a failover can take it back. It counts as unavailable: the caller
// retries as is (an append with the same event ids is answered from the
// log once the commit is durable).
var ErrUnconfirmed = errors.New("the commit's wait for synchronous standbys was cancelled: it may be on this server only")

// Unavailable reports whether err, from a database call, says that the
// database is unavailable: no connection could be made (refused, timed
// out, too many connections, starting up), the pool is closed (shutdown),
// the connection was closed, broke or timed out under a query (net
// errors, EOF, pgconn.ErrConnClosed, errors pgconn marks safe to retry),
// the server ended the session (SQLSTATE class 08, 57P01-57P03, 57P05),
// the server is a read-only standby (25006), or a commit was not
// confirmed (ErrUnconfirmed). A deadline that ran out is
// counted too: the database did not answer in time. context.Canceled is
// not: the caller left.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true // whatever the server said while refusing the connection
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "08") || unavailableCodes[pgErr.Code]
	}
	var netErr net.Error
	switch {
	case errors.As(err, &netErr):
		return true
	case errors.Is(err, puddle.ErrClosedPool), errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, ErrUnconfirmed):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}
