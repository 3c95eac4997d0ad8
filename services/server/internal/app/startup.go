package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bothy/bothy/services/server/internal/dbfault"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// startRetryMin and startRetryMax bound the pause between two tries of a
// start step that could not reach the database: it doubles from the first
// to the second, so a database that comes back is found within seconds
// without a process trying hundreds of times a minute.
const (
	startRetryMin = 250 * time.Millisecond
	startRetryMax = 10 * time.Second
)

// startRetryDelay is the pause after the n-th failed try (n from 1),
// drawn from the upper half of its doubling step, so processes restarted
// together do not all try at the same moments.
func startRetryDelay(n int) time.Duration {
	d := startRetryMax
	if n <= 10 {
		d = min(startRetryMin<<(n-1), startRetryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// unreachable reports whether err, from a start step, means that the
// database cannot be reached now (connection refused or timed out, the
// server starting up, shutting down or out of connections, a standby
// where the primary is wanted: dbfault.Unavailable), as opposed to
// refusing what the configuration asks for (a password or a database name
// it does not know, a TLS setting, an asynchronous commit): only the first
// is waited for. A connection attempt's error is judged by what the
// server said, if it said anything, else by the cause pgconn wraps.
func unreachable(err error) bool {
	if errors.Is(err, postgres.ErrAsyncCommitRequested) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return dbfault.Unavailable(pgErr)
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return dbfault.Unavailable(connectErr.Unwrap())
	}
	return dbfault.Unavailable(err)
}

// untilReachable runs step, the start step named what, until it succeeds
// or fails for another reason than an unreachable database, pausing
// between tries (startRetryDelay) and giving up after database.start_wait
// if that is set. Meanwhile /readyz answers 503 with the reason. It logs
// when it starts to wait, when the reason changes, and when the step
// succeeds after waiting; not every try.
func (r *run) untilReachable(ctx context.Context, what string, step func(context.Context) error) error {
	logger, limit := r.s.logger, r.s.cfg.Database.StartWait
	var since time.Time
	var last string
	for n := 1; ; n++ {
		err := step(ctx)
		if err == nil || ctx.Err() != nil || !unreachable(err) {
			r.waiting.Store(nil)
			if err == nil && n > 1 {
				logger.InfoContext(ctx, "the database answers: starting", slog.String("step", what),
					slog.Int("tries", n), slog.Duration("waited", time.Since(since).Round(time.Millisecond)))
			}
			return err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if limit > 0 && time.Since(since) >= limit {
			return fmt.Errorf("%s: the database did not answer within database.start_wait %s: %w", what, limit, err)
		}
		reason := fmt.Sprintf("waiting for the database (%s): %v", what, err)
		r.waiting.Store(&reason)
		if msg := err.Error(); msg != last {
			logger.WarnContext(ctx, "waiting for the database", slog.String("step", what), slog.Int("tries", n), slog.Any("error", err))
			last = msg
		}
		t := time.NewTimer(startRetryDelay(n))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
