package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestDevLog_AnOutageIsOneLinePerChange feeds bothy dev's log a burst of
// the errors the roles log while the database is away (a failover): the
// terminal gets one line when the probe finds the database unavailable and
// one when it answers again, not a record per failed call; other records
// pass through; after the outage a database error whose probe succeeds at
// once is logged as it is.
func TestDevLog_AnOutageIsOneLinePerChange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, stderr := &syncBuffer{}, &syncBuffer{}
	answers := make(chan error)
	probe := func(ctx context.Context) error {
		select {
		case err := <-answers:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	answer := func(err error) {
		t.Helper()
		select {
		case answers <- err:
		case <-time.After(10 * time.Second):
			t.Fatalf("the database was not probed; terminal:\n%s\nlog:\n%s", out.String(), stderr.String())
		}
	}
	logger := slog.New(newDevLogHandler(ctx, slog.NewTextHandler(stderr, nil), out, probe, time.Millisecond))

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	postmasterExit := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to unexpected postmaster exit"}
	river := "failed to connect to `user=postgres database=bothy_dev`:\n\t127.0.0.1:40099 (127.0.0.1): dial error: " +
		"dial tcp 127.0.0.1:40099: connect: connection refused\n\t127.0.0.1:34663 (127.0.0.1): server error: " +
		"FATAL: the database system is starting up (SQLSTATE 57P03)"
	burst := func(n int) {
		for i := range n {
			logger.Error("consumer round failed", slog.String("consumer", "webhooks"), slog.Any("error", fmt.Errorf("round %d: begin: %w", i, refused)))
			logger.With(slog.String("queue", "webhooks")).Error("producer: Error fetching jobs", slog.String("err", river))
			logger.Warn("liveness session lost; locking again", slog.Any("error", postmasterExit))
		}
	}

	burst(30)
	logger.Warn("webhook receiver answered 500", slog.String("subscription", "s1"))
	answer(errors.New("failed to connect to `user=postgres database=bothy_dev`:\n\t127.0.0.1:40099: connection refused\n\t127.0.0.1:40099: connection refused"))
	waitOutput(t, out, regexp.MustCompile(`bothy dev: database unavailable: `), 1, 10*time.Second)
	burst(30)
	answer(errors.New("still refused"))
	answer(nil)
	waitOutput(t, out, regexp.MustCompile(`bothy dev: database back after \S+ \(\d+ log records about it not shown\)`), 1, 10*time.Second)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "one line per change:\n%s", out.String())
	require.Equal(t, "bothy dev: database unavailable: failed to connect to `user=postgres database=bothy_dev`: 127.0.0.1:40099: connection refused", lines[0])
	require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "only the record not about the database:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "webhook receiver answered 500")

	// A lone error while the database answers is logged as it is.
	logger.Error("consumer round failed", slog.Any("error", refused))
	answer(nil)
	waitOutput(t, stderr, regexp.MustCompile(`msg="consumer round failed"`), 1, 10*time.Second)
	require.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 2)
}
