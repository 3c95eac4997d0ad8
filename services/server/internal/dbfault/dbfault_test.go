package dbfault_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbfault"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestUnavailable_Table holds the classifier to its list, each error
// wrapped as callers wrap them.
func TestUnavailable_Table(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return &pgconn.PgError{Severity: "FATAL", Code: code} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"ConnClosed", pgconn.ErrConnClosed, true},
		{"ConnectError", &pgconn.ConnectError{Config: &pgconn.Config{}}, true},
		{"ClosedPool", puddle.ErrClosedPool, true},
		{"NetOpError", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"DNSError", &net.DNSError{Err: "no such host", Name: "db"}, true},
		{"ConnectionRefused", syscall.ECONNREFUSED, true},
		{"BrokenPipe", syscall.EPIPE, true},
		{"EOF", io.EOF, true},
		{"UnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"Deadline", context.DeadlineExceeded, true},
		{"DeadlineOSError", os.ErrDeadlineExceeded, true},
		{"ConnectionException08000", pg("08000"), true},
		{"ConnectionFailure08006", pg("08006"), true},
		{"ProtocolViolation08P01", pg("08P01"), true},
		{"AdminShutdown57P01", pg("57P01"), true},
		{"CrashShutdown57P02", pg("57P02"), true},
		{"CannotConnectNow57P03", pg("57P03"), true},
		{"IdleSessionTimeout57P05", pg("57P05"), true},
		{"TooManyConnections53300", pg("53300"), true},
		{"ReadOnlyTransaction25006", pg("25006"), true},
		{"Unconfirmed", fmt.Errorf("append: committed, durability unconfirmed: %w", dbfault.ErrUnconfirmed), true},

		{"Nil", nil, false},
		{"Canceled", context.Canceled, false},
		{"CanceledAfterANetError", fmt.Errorf("%w: %w", context.Canceled, &net.OpError{Op: "read", Err: syscall.ECONNRESET}), false},
		{"QueryCanceled57014", pg("57014"), false},
		{"UniqueViolation23505", pg("23505"), false},
		{"UntranslatableCharacter22P05", pg("22P05"), false},
		{"SerializationFailure40001", pg("40001"), false},
		{"DatabaseDropped57P04", pg("57P04"), false},
		{"NoRows", pgx.ErrNoRows, false},
		{"Other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.err
			if err != nil {
				err = fmt.Errorf("append: begin: %w", err)
			}
			require.Equal(t, tc.want, dbfault.Unavailable(err), "%v", err)
		})
	}
}

// TestUnavailable_RealErrors classifies the errors pgx really returns:
// a closed connection, a terminated session, a refused connection and a
// write in a read-only transaction (what a standby answers).
func TestUnavailable_RealErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.ServerURL(t)
	connect := func(t *testing.T) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
		return conn
	}
	t.Run("ClosedConnection", func(t *testing.T) {
		t.Parallel()
		conn := connect(t)
		require.NoError(t, conn.Close(ctx))
		_, err := conn.Exec(ctx, `SELECT 1`)
		require.Error(t, err)
		require.True(t, dbfault.Unavailable(err), "%v", err)
	})
	t.Run("TerminatedSessionAndThenItsClosedConnection", func(t *testing.T) {
		t.Parallel()
		conn, killer := connect(t), connect(t)
		var ok bool
		require.NoError(t, killer.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, conn.PgConn().PID()).Scan(&ok))
		require.True(t, ok)
		for range 2 {
			_, err := conn.Exec(ctx, `SELECT 1`)
			require.Error(t, err)
			require.True(t, dbfault.Unavailable(err), "%v", err)
		}
	})
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		_, err := pgx.Connect(ctx, dbtest.UnreachableURL(t))
		require.Error(t, err)
		require.True(t, dbfault.Unavailable(err), "%v", err)
	})
	t.Run("WriteOnAReadOnlyServer", func(t *testing.T) {
		t.Parallel()
		conn := connect(t)
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `CREATE TEMP TABLE t (x int)`)
		require.Error(t, err)
		require.True(t, dbfault.Unavailable(err), "%v", err)
	})
}
