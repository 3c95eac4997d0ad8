package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbfault"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// TestSynchronousStandby: where a synchronous standby is configured, an
// acknowledgment and a read must wait until it has the WAL too, or a
// failover to it takes back what was shown. A wait that is cancelled ends
// in a local commit with a warning, which must not count as durable. The private cluster names a
// synchronous standby that never connects, so every commit that waits for
// one waits until the test releases it (by clearing
// synchronous_standby_names); a backend waiting so shows the wait event
// SyncRep.
func TestSynchronousStandby(t *testing.T) {
	p := dbtest.NewPrivate(t, map[string]string{"shared_buffers": "32MB", "max_connections": "40"})
	// The pool as the roles open it (app.OpenPool): it watches for the
	// warning of a cancelled wait.
	pc, err := pgxpool.ParseConfig(p.URL)
	require.NoError(t, err)
	postgres.RequireSynchronousCommit(pc)
	// One connection, warmed up: a new connection's first reads can write
	// WAL of their own (see dbtest.BeginAsync), which would make the
	// barrier flush whatever it checks.
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(context.Background(), `UPDATE event_seq SET last_seq = last_seq`)
	require.NoError(t, err)
	admin := p.Pool(t)
	log := postgres.NewEventLog(pool, nil)
	t.Cleanup(log.Close)
	appendOne := func(ctx context.Context) error {
		_, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "a"}}, nil
		})
		return err
	}
	appendViaAppend := func(ctx context.Context) error {
		_, err := log.Append(ctx, []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "a"}})
		return err
	}

	// The warm-up also runs what is tested once (its first planning reads
	// catalog pages), and vacuums, so that no session prunes a page (which
	// writes WAL) while a test needs the WAL flushed to its end.
	require.NoError(t, appendOne(context.Background()))
	require.NoError(t, appendViaAppend(context.Background()))
	require.NoError(t, postgres.Durable(context.Background(), pool))
	_, err = admin.Exec(context.Background(), `VACUUM`)
	require.NoError(t, err)

	t.Run("BarrierWaitsForTheStandbyWhenTheDiskHasEverything", func(t *testing.T) {
		standbyAbsent(t, admin)
		// As a round commits: visible at once, flushed by the WAL writer.
		dbtest.BumpSeqAsync(t, pool, 3)
		waitLocalFlush(t, admin)
		done := start(func() error { return postgres.Durable(context.Background(), pool) })
		waitSyncRep(t, admin, done, "the barrier returned while the synchronous standby lacked the commit it would show")
		standbyBack(t, admin)
		require.NoError(t, <-done)
	})

	t.Run("WriteWhoseStandbyWaitIsCancelledIsUnconfirmed", func(t *testing.T) {
		standbyAbsent(t, admin)
		done := start(func() error { return appendOne(context.Background()) })
		waitSyncRep(t, admin, done, "the write returned before the synchronous standby had its events")
		// A cancelled wait for the standby ends the commit as a local one,
		// with a warning: the caller must not take it as acknowledged.
		cancelSyncRepWaits(t, admin)
		err := <-done
		require.ErrorIs(t, err, dbfault.ErrUnconfirmed)
		require.ErrorContains(t, err, "committed, durability unconfirmed")
		standbyBack(t, admin)
	})

	t.Run("AppendWhoseStandbyWaitIsCancelledIsUnconfirmed", func(t *testing.T) {
		standbyAbsent(t, admin)
		done := start(func() error { return appendViaAppend(context.Background()) })
		waitSyncRep(t, admin, done, "the append returned before the synchronous standby had its events")
		cancelSyncRepWaits(t, admin)
		err := <-done
		require.ErrorIs(t, err, dbfault.ErrUnconfirmed)
		require.ErrorContains(t, err, "committed, durability unconfirmed")
		standbyBack(t, admin)
	})

	t.Run("BarrierWhoseStandbyWaitIsCancelledFails", func(t *testing.T) {
		standbyAbsent(t, admin)
		dbtest.BumpSeqAsync(t, pool, 1)
		done := start(func() error { return postgres.Durable(context.Background(), pool) })
		waitSyncRep(t, admin, done, "the barrier returned before the synchronous standby had the commit")
		cancelSyncRepWaits(t, admin)
		require.ErrorIs(t, <-done, dbfault.ErrUnconfirmed)
		standbyBack(t, admin)
	})

	t.Run("AcknowledgedOnceTheStandbyConfirms", func(t *testing.T) {
		standbyAbsent(t, admin)
		done := start(func() error { return appendOne(context.Background()) })
		waitSyncRep(t, admin, done, "the write returned before the synchronous standby had its events")
		standbyBack(t, admin)
		require.NoError(t, <-done)
	})

	t.Run("AppendAcknowledgedOnceTheStandbyConfirms", func(t *testing.T) {
		standbyAbsent(t, admin)
		done := start(func() error { return appendViaAppend(context.Background()) })
		waitSyncRep(t, admin, done, "the append returned before the synchronous standby had its events")
		standbyBack(t, admin)
		require.NoError(t, <-done)
	})
}

// cancelSyncRepWaits cancels the queries of the backends waiting for the
// synchronous standby, as an operator might cancel commits that hang.
func cancelSyncRepWaits(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		`SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n))
	require.Positive(t, n)
}

// start runs f in a goroutine and delivers its result.
func start(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

// standbyAbsent configures a synchronous standby that never connects and
// waits until new sessions see it.
func standbyAbsent(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	setStandbyNames(t, admin, "bothy_absent_standby")
}

// standbyBack clears synchronous_standby_names, which releases every
// commit waiting for a standby.
func standbyBack(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	setStandbyNames(t, admin, "")
}

func setStandbyNames(t *testing.T, admin *pgxpool.Pool, names string) {
	ctx := context.Background()
	_, err := admin.Exec(ctx, `ALTER SYSTEM SET synchronous_standby_names = '`+names+`'`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	testwait.Until(t, 30*time.Second, func() bool {
		conn, err := pgx.Connect(ctx, admin.Config().ConnString())
		require.NoError(t, err)
		defer conn.Close(ctx)
		var got string
		require.NoError(t, conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&got))
		return got == names
	}, "synchronous_standby_names = %q in new sessions", names)
}

// waitLocalFlush waits until the WAL is on the local disk up to its end.
func waitLocalFlush(t *testing.T, admin *pgxpool.Pool) {
	t.Helper()
	testwait.Until(t, 30*time.Second, func() bool {
		var flushed bool
		require.NoError(t, admin.QueryRow(context.Background(),
			`SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()`).Scan(&flushed))
		return flushed
	}, "the WAL writer flushing the WAL")
}

// waitSyncRep waits until a backend waits for the synchronous standby,
// failing with msg if done delivers first.
func waitSyncRep(t *testing.T, admin *pgxpool.Pool, done <-chan error, msg string) {
	t.Helper()
	testwait.Until(t, 30*time.Second, func() bool {
		select {
		case err := <-done:
			t.Fatalf("%s (returned %v)", msg, err)
		default:
		}
		var n int
		require.NoError(t, admin.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'`).Scan(&n))
		return n > 0
	}, "a commit waiting for the synchronous standby")
}
