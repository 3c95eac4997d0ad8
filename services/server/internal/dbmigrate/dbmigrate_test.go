package dbmigrate_test

import (
	"context"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/dburl"
)

// emptyDB creates an unmigrated database and returns its URL.
func emptyDB(t *testing.T) string {
	t.Helper()
	admin := dbtest.ServerURL(t)
	u, err := dburl.NewURL(admin, "bothy_test_mig")
	require.NoError(t, err)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{dburl.Name(u)}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() { _ = dburl.DropVia(context.Background(), admin, dburl.Name(u)) })
	return u
}

// upFromProcesses runs up from n pools on the database at u at once, as n
// processes starting with --migrate would, requires each to succeed and
// returns what each applied.
func upFromProcesses(t *testing.T, ctx context.Context, u string, n int,
	up func(context.Context, *pgxpool.Pool) (*dbmigrate.Result, error),
) []*dbmigrate.Result {
	t.Helper()
	results := make([]*dbmigrate.Result, n)
	errs := make([]error, n)
	var wg gosync.WaitGroup
	for i := range n {
		wg.Go(func() {
			pool, err := pgxpool.New(ctx, u)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			results[i], errs[i] = up(ctx, pool)
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return results
}

// TestUp_ConcurrentProcessesApplyOnce runs Up from several pools at once on
// an empty database, as several processes starting with --migrate would:
// all succeed, each migration is applied exactly once, and a later Up finds
// nothing to do.
func TestUp_ConcurrentProcessesApplyOnce(t *testing.T) {
	t.Parallel()
	u := emptyDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	results := upFromProcesses(t, ctx, u, 4, dbmigrate.Up)
	all, err := dbmigrate.Load()
	require.NoError(t, err)
	applied := 0
	for _, res := range results {
		applied += len(res.Applied)
	}
	require.Equal(t, len(all), applied, "every migration applied by exactly one of the processes")

	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	defer pool.Close()
	again, err := dbmigrate.Up(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	require.Empty(t, again.RiverApplied)
	st, err := dbmigrate.GetStatus(ctx, pool)
	require.NoError(t, err)
	require.True(t, st.Current())
	require.Len(t, st.Applied, len(all))

	// The baseline tunes River's GIN indexes; a River upgrade that
	// recreates them would drop the setting silently, this notices.
	var tuned int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_class
		WHERE relname IN ('river_job_args_index', 'river_job_metadata_index')
		  AND 'gin_pending_list_limit=64' = ANY (reloptions)`).Scan(&tuned))
	require.Equal(t, 2, tuned, "river_job's GIN indexes keep gin_pending_list_limit=64")
}

// emptyPool is a pool on an unmigrated database of the test's own.
func emptyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), emptyDB(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestGetStatus_EmptyDatabaseIsPending(t *testing.T) {
	t.Parallel()
	u := emptyDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	defer pool.Close()
	st, err := dbmigrate.GetStatus(ctx, pool)
	require.NoError(t, err)
	require.False(t, st.Current())
	require.Zero(t, st.RiverCurrent)
	require.NotEmpty(t, st.Pending)
}

// TestUp_RefusesADatabaseFromBeforeTheBaseline: a development database
// migrated by the files the baseline replaced records other migrations
// under the baseline's numbers, without checksums. Applying by number would
// skip the new files that reuse them; Up and GetStatus refuse and say to
// recreate it.
func TestUp_RefusesADatabaseFromBeforeTheBaseline(t *testing.T) {
	t.Parallel()
	pool := emptyPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `
		CREATE TABLE bothy_schema_migrations (
		    version    integer     PRIMARY KEY,
		    name       text        NOT NULL,
		    applied_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO bothy_schema_migrations (version, name) VALUES (1, 'event_log'), (2, 'event_consumer_cursors')`)
	require.NoError(t, err)

	_, err = dbmigrate.Up(ctx, pool)
	require.ErrorIs(t, err, dbmigrate.ErrDevDatabase)
	require.ErrorContains(t, err, "recreate it")
	var river bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('river_job') IS NOT NULL`).Scan(&river))
	require.False(t, river, "a refused database is left as it was")
	_, err = dbmigrate.GetStatus(ctx, pool)
	require.ErrorIs(t, err, dbmigrate.ErrDevDatabase)
	require.ErrorContains(t, err, "dropdb bothy_test_mig_")
}
