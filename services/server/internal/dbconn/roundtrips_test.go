package dbconn_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

func TestRoundTrips_CountsEachTripOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	reg := prometheus.NewRegistry()
	rt := &dbconn.RoundTrips{}
	rt.Register(reg)
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	pc.MaxConns = 1
	rt.Install(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	count := func(kind string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
		return 0
	}
	_, err = pool.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	require.EqualValues(t, 1, count("connect"))
	queries := count("query")
	b := &pgx.Batch{}
	for range 5 {
		b.Queue(`SELECT 1`)
	}
	require.NoError(t, pool.SendBatch(ctx, b).Close())
	require.EqualValues(t, 1, count("batch"), "five statements in one pipeline are one trip")
	require.Equal(t, queries, count("query"), "a batch's statements are not queries of their own")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	// BEGIN, one query, a pipelined batch of three statements, COMMIT.
	before := rt.Total()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for range 3 {
			b.Queue(`SELECT 1`)
		}
		return tx.SendBatch(ctx, b).Close()
	})
	require.NoError(t, err)
	require.Equal(t, int64(4), rt.Total()-before, rt.String())
}
