package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestLagCollector_ShowsOnlyDurableState: the head and lag gauges may be
// read from a producer's or round's commit that is not on disk yet; a
// scrape must not publish a head that a crash then takes back (the seq
// would later be handed to another event).
func TestLagCollector_ShowsOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, p.URL)
	require.NoError(t, err)
	defer func() { pool.Close() }()

	// Warm up first: the first touch of a page after a checkpoint and the
	// first reads (pruning) write WAL of their own, enough to complete a
	// WAL page, which the WAL writer then writes out, and the commit below
	// with it. The test needs that commit to stay in the buffers.
	_, err = pool.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq`)
	require.NoError(t, err)
	for range 2 {
		_, err = postgres.ConsumerStatuses(ctx, pool)
		require.NoError(t, err)
	}
	// As the counter is taken inside a producer's window: asynchronously.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SET LOCAL synchronous_commit = off`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq + 7`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	want := "# HELP bothy_event_log_head_seq The newest seq handed out by the event log.\n" +
		"# TYPE bothy_event_log_head_seq gauge\nbothy_event_log_head_seq 7\n"
	require.NoError(t, testutil.CollectAndCompare(postgres.NewLagCollector(pool, nil), strings.NewReader(want), "bothy_event_log_head_seq"))

	pool.Close()
	p.CrashAndRestart(t)
	pool, err = pgxpool.New(ctx, p.URL)
	require.NoError(t, err)
	head, err := postgres.Head(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(7), head, "the scrape published a head that the crash took back")
}
