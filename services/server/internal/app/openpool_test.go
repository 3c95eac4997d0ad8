package app_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestOpenPool_SynchronousCommit: every role opens its pool with OpenPool,
// whose connections commit synchronously whatever the database's or
// role's default says, and a URL that asks for asynchronous commits is
// refused with the setting's name.
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
		for _, q := range []string{"synchronous_commit=off", "options=" + url.QueryEscape("-c synchronous_commit=local")} {
			cfg, err := config.Load("", nil, map[string]string{"database.url": db.URL + "&" + q})
			require.NoError(t, err)
			_, err = app.OpenPool(context.Background(), cfg)
			require.ErrorContains(t, err, "synchronous_commit", q)
			require.ErrorContains(t, err, "database.url", q)
		}
	})
}
