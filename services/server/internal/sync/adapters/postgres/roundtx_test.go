package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestRoundTx_CommitsAsynchronouslyOnlyTheRound checks both halves of the
// argument in RoundTx's comment: the round's transaction does not wait for
// the flush, and the setting dies with it, so the next user of the pooled
// connection (River marking a job running) commits synchronously again.
func TestRoundTx_CommitsAsynchronouslyOnlyTheRound(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	ctx := context.Background()
	// One connection, so the query after the commit runs where the round did.
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for range 3 {
		tx, err := postgres.RoundTx{Pool: pool}.Begin(ctx)
		require.NoError(t, err)
		var in string
		require.NoError(t, tx.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&in))
		require.Equal(t, "off", in)
		require.NoError(t, tx.Commit(ctx))

		var after string
		require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&after))
		require.Equal(t, "on", after, "SET LOCAL must not outlive the round's transaction")
	}
}
