package app_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
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
