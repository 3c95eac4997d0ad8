package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"
)

func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("append 1 events: %w", err) }
	for _, err := range []error{
		&pgconn.PgError{Code: "57P01"}, &pgconn.PgError{Code: "57P02"}, &pgconn.PgError{Code: "57P03"},
		&pgconn.PgError{Code: "08006"}, &pgconn.PgError{Code: "08P01"},
		&pgconn.ConnectError{Config: &pgconn.Config{}},
		puddle.ErrClosedPool, context.DeadlineExceeded, io.ErrUnexpectedEOF,
		&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")},
	} {
		require.True(t, databaseUnavailable(wrap(err)), "%#v", err)
	}
	for _, err := range []error{
		&pgconn.PgError{Code: "22P05"}, &pgconn.PgError{Code: "23505"}, &pgconn.PgError{Code: "57014"},
		context.Canceled, errors.New("boom"), &apiError{status: 422},
	} {
		require.False(t, databaseUnavailable(wrap(err)), "%#v", err)
	}
}
