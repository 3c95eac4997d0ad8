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

// devLogProbe is a probe of the database that answers what the test says.
type devLogProbe struct {
	answers chan error
}

func (p *devLogProbe) probe(ctx context.Context) error {
	select {
	case err := <-p.answers:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answer is the probe's next answer; the probe must be called in time.
func (p *devLogProbe) answer(t *testing.T, err error) {
	t.Helper()
	select {
	case p.answers <- err:
	case <-time.After(10 * time.Second):
		t.Fatal("the database was not probed")
	}
}

// newTestDevLog is a dev log writing the roles' records to stderr and the
// state lines to out, probing with the test's answers.
func newTestDevLog(t *testing.T, grace time.Duration) (logger *slog.Logger, st *devDBState, p *devLogProbe, out, stderr *syncBuffer) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, stderr, p = &syncBuffer{}, &syncBuffer{}, &devLogProbe{answers: make(chan error)}
	h := newDevLogHandler(ctx, slog.NewTextHandler(stderr, nil), &devLogConfig{Out: out, Probe: p.probe, Interval: time.Millisecond, Grace: grace})
	return slog.New(h), h.(*devLogHandler).st, p, out, stderr
}

// waitDevLogUp waits until the dev log takes the database for up again,
// having logged what it held back.
func waitDevLogUp(t *testing.T, st *devDBState) {
	t.Helper()
	require.Eventually(t, func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.state == devDBUp
	}, 10*time.Second, time.Millisecond)
}

var (
	connRefused    = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	postmasterExit = &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to unexpected postmaster exit"}
	// riverConnectError is a failed connection as River logs it: text.
	riverConnectError = "failed to connect to `user=postgres database=bothy_dev`:\n\t127.0.0.1:40099 (127.0.0.1): dial error: " +
		"dial tcp 127.0.0.1:40099: connect: connection refused\n\t127.0.0.1:34663 (127.0.0.1): server error: " +
		"FATAL: the database system is starting up (SQLSTATE 57P03)"
)

// logOutage logs n rounds of what the roles log while the database is
// away.
func logOutage(logger *slog.Logger, n int) {
	for i := range n {
		logger.Error("consumer round failed", slog.String("consumer", "webhooks"), slog.Any("error", fmt.Errorf("round %d: begin: %w", i, connRefused)))
		logger.With(slog.String("queue", "webhooks")).Error("producer: Error fetching jobs", slog.String("err", riverConnectError))
		logger.Warn("liveness session lost; locking again", slog.Any("error", postmasterExit))
	}
}

// TestDevLog_AnOutageIsOneLinePerChange feeds bothy dev's log a burst of
// the errors the roles log while the database is away (a failover): the
// terminal gets one line when the probe finds the database unavailable and
// one when it answers again, not a record per failed call; other records
// pass through; an error that comes shortly after, while the database
// answers, is taken for an aftermath of the outage and not shown.
func TestDevLog_AnOutageIsOneLinePerChange(t *testing.T) {
	t.Parallel()
	logger, st, p, out, stderr := newTestDevLog(t, time.Hour)

	logOutage(logger, 30)
	logger.Warn("webhook receiver answered 500", slog.String("subscription", "s1"))
	p.answer(t, errors.New("failed to connect to `user=postgres database=bothy_dev`:\n\t127.0.0.1:40099: connection refused\n\t127.0.0.1:40099: connection refused"))
	waitOutput(t, out, regexp.MustCompile(`bothy dev: database unavailable: `), 1, 10*time.Second)
	logOutage(logger, 30)
	p.answer(t, errors.New("still refused"))
	p.answer(t, nil)
	waitOutput(t, out, regexp.MustCompile(`bothy dev: database back after \S+ \(\d+ log records about it not shown\)`), 1, 10*time.Second)

	logger.Error("jobcompleter.BatchCompleter: Error completing batch", slog.String("err", riverConnectError))
	p.answer(t, nil)
	waitDevLogUp(t, st)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "one line per change:\n%s", out.String())
	require.Equal(t, "bothy dev: database unavailable: failed to connect to `user=postgres database=bothy_dev`: 127.0.0.1:40099: connection refused", lines[0])
	require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "only the record not about the database:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "webhook receiver answered 500")
}

// TestDevLog_ALoneDatabaseErrorIsShownOnOneLine: a database error while
// the database answers, long after any outage, is logged, its error on one
// line.
func TestDevLog_ALoneDatabaseErrorIsShownOnOneLine(t *testing.T) {
	t.Parallel()
	logger, st, p, out, stderr := newTestDevLog(t, 0)

	logger.Error("producer: Error fetching jobs", slog.String("err", riverConnectError))
	p.answer(t, nil)
	waitDevLogUp(t, st)
	require.Empty(t, out.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "\n"), stderr.String())
	require.Contains(t, stderr.String(), `msg="producer: Error fetching jobs" err="failed to connect to `+"`user=postgres database=bothy_dev`"+
		`: 127.0.0.1:40099 (127.0.0.1): dial error: dial tcp 127.0.0.1:40099: connect: connection refused 127.0.0.1:34663`)
	require.NotContains(t, stderr.String(), `\n`)
}
