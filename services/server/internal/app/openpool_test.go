package app_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbfault"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestOpenPool_SynchronousCommit: every role opens its pool with OpenPool,
// whose connections commit synchronously whatever the database's or
// role's default says, and a URL (or PGOPTIONS) that asks for
// asynchronous commits is refused with the setting's name, however
// PostgreSQL lets it be spelled.
func TestOpenPool_SynchronousCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dbDefault, want string
	}{
		{"DatabaseDefaultOffIsOverridden", "off", "on"},
		{"DatabaseDefaultLocalIsOverridden", "local", "on"},
		{"StrongerSettingIsKept", "remote_apply", "remote_apply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := dbtest.NewDB(t)
			ctx := context.Background()
			_, err := db.Pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+` SET synchronous_commit = `+tc.dbDefault)
			require.NoError(t, err)
			for _, role := range []string{"api", "worker"} {
				cfg, err := config.Load("", nil, map[string]string{"database.url": db.URL, "server.role": role})
				require.NoError(t, err)
				pool, err := app.OpenPool(ctx, cfg)
				require.NoError(t, err)
				var got string
				require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got))
				pool.Close()
				require.Equal(t, tc.want, got, "role %s", role)
			}
		})
	}
	t.Run("URLAskingForAsynchronousCommitIsRefused", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		for _, q := range []string{
			"synchronous_commit=off",
			"options=" + optionsParam("-c synchronous_commit=local"),
			"options=" + optionsParam("-c synchronous-commit=off"),
			"options=" + optionsParam("-csynchronous_commit=OFF"),
			"options=" + optionsParam("--synchronous-commit=local"),
		} {
			cfg, err := config.Load("", nil, map[string]string{"database.url": db.URL + "&" + q})
			require.NoError(t, err)
			_, err = app.OpenPool(context.Background(), cfg)
			require.ErrorIs(t, err, postgres.ErrAsyncCommitRequested, q)
			require.ErrorContains(t, err, "synchronous_commit", q)
			require.ErrorContains(t, err, "database.url", q)
		}
	})
	t.Run("URLAskingForAStrongerCommitIsKept", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		ctx := context.Background()
		cfg, err := config.Load("", nil, map[string]string{"database.url": db.URL + "&options=" + optionsParam("-c synchronous-commit=remote_write")})
		require.NoError(t, err)
		pool, err := app.OpenPool(ctx, cfg)
		require.NoError(t, err)
		defer pool.Close()
		var got string
		require.NoError(t, pool.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&got))
		require.Equal(t, "remote_write", got)
	})
}

// optionsParam escapes a libpq options string for a URL query (a space as
// %20: pgx does not read + as one).
func optionsParam(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// TestOpenPool_SynchronousCommitFromPGOPTIONS: PGOPTIONS asks the server as
// the URL's options do, and is refused the same way. (Not parallel: it sets
// the process's environment.)
func TestOpenPool_SynchronousCommitFromPGOPTIONS(t *testing.T) {
	db := dbtest.NewDB(t)
	t.Setenv("PGOPTIONS", "-c synchronous-commit=off")
	cfg, err := config.Load("", nil, map[string]string{"database.url": db.URL})
	require.NoError(t, err)
	_, err = app.OpenPool(context.Background(), cfg)
	require.ErrorIs(t, err, postgres.ErrAsyncCommitRequested)
	require.ErrorContains(t, err, "PGOPTIONS")
}

// TestOpenPool_PassesOverAHostThatStoppedAnswering: on a failover
// formation's URL (every node, target_session_attrs=read-write) the pool
// must reach the primary when the first node stopped answering without
// refusing anything, as a lost machine does: a new connection gives up on
// it after dbconn.ConnectTimeout and tries the next host, and an idle
// connection to it fails its ping within the pool's ping timeout and is
// replaced, instead of holding the caller until its own deadline.
func TestOpenPool_PassesOverAHostThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	open := func(t *testing.T, lost *dbtest.FrozenProxy) *pgxpool.Pool {
		u := dbtest.WithHosts(t, db.URL, lost.Addr()+","+dbtest.HostPort(t, db.URL))
		cfg, err := config.Load("", nil, map[string]string{"database.url": u + "&target_session_attrs=read-write"})
		require.NoError(t, err)
		pool, err := app.OpenPool(context.Background(), cfg)
		require.NoError(t, err, "OpenPool pings within 10 s")
		t.Cleanup(pool.Close)
		t.Cleanup(lost.Close) // first: closing a pool waits on connections nobody answers
		return pool
	}

	t.Run("NewConnections", func(t *testing.T) {
		t.Parallel()
		lost := dbtest.NewFrozenProxy(t, dbtest.HostPort(t, db.URL))
		lost.Freeze()
		open(t, lost)
	})

	t.Run("IdleConnections", func(t *testing.T) {
		t.Parallel()
		lost := dbtest.NewFrozenProxy(t, dbtest.HostPort(t, db.URL))
		pool := open(t, lost) // its connection goes through the proxy
		lost.Freeze()
		// The pool pings only a connection idle for more than a second.
		time.Sleep(1100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var one int
		require.NoError(t, pool.QueryRow(ctx, `SELECT 1`).Scan(&one), "the query waited on the connection to the lost host")
	})
}

// TestOpenPool_DropsConnectionsToAServerTurnedReadOnly: a primary being
// demoted turns read-only under its open sessions
// (default_transaction_read_only, as failover managers set it). The write
// that meets it fails as the database being unavailable (a 503, retried),
// and its connection is not handed out again.
func TestOpenPool_DropsConnectionsToAServerTurnedReadOnly(t *testing.T) {
	t.Parallel()
	p := dbtest.NewPrivate(t, map[string]string{"shared_buffers": "32MB", "max_connections": "20"})
	ctx := context.Background()
	cfg, err := config.Load("", nil, map[string]string{"database.url": p.URL})
	require.NoError(t, err)
	pool, err := app.OpenPool(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	admin := p.Pool(t)
	_, err = admin.Exec(ctx, `ALTER SYSTEM SET default_transaction_read_only = on`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)

	c, err := pool.Acquire(ctx)
	require.NoError(t, err)
	pid := c.Conn().PgConn().PID()
	deadline := time.Now().Add(30 * time.Second)
	for _, err = c.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq`); err == nil; _, err = c.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq`) {
		require.True(t, time.Now().Before(deadline), "the server did not turn read-only") // the reload is asynchronous
		time.Sleep(10 * time.Millisecond)
	}
	c.Release()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "25006", pgErr.Code)
	require.True(t, dbfault.Unavailable(err), "a write on a read-only server is a 503")

	deadline = time.Now().Add(30 * time.Second)
	for inPool(ctx, t, pool, pid) {
		require.True(t, time.Now().Before(deadline), "the connection that met the read-only server is still handed out")
		time.Sleep(10 * time.Millisecond) // the pool closes released connections asynchronously
	}
}

// inPool reports whether an idle connection of pool has backend pid.
func inPool(ctx context.Context, t *testing.T, pool *pgxpool.Pool, pid uint32) bool {
	found := false
	for _, c := range pool.AcquireAllIdle(ctx) {
		found = found || c.Conn().PgConn().PID() == pid
		c.Release()
	}
	return found
}
