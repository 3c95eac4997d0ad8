package app_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// readyz returns the status and body of base's /readyz.
func readyz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// TestServer_MigrationHistory: a server checks the database's migrations
// against its own files, at start and at every /readyz.
func TestServer_MigrationHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("EditedMigrationTurnsReadyzRed", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		base := apptest.Start(t, apptest.Flags(db.URL, "api"))
		code, _ := readyz(t, base)
		require.Equal(t, http.StatusOK, code)

		_, err := db.Pool.Exec(ctx, `UPDATE bothy_schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`)
		require.NoError(t, err)
		code, body := readyz(t, base)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Contains(t, body, "0001_baseline.sql was changed after it was applied")
	})
	t.Run("RolledBackBinaryStartsOnNewerMigrations", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		_, err := db.Pool.Exec(ctx, `INSERT INTO bothy_schema_migrations (version, name, checksum)
			VALUES (9999, 'of_a_newer_release', repeat('a', 64))`)
		require.NoError(t, err)
		base := apptest.Start(t, apptest.Flags(db.URL, "api"))
		code, body := readyz(t, base)
		require.Equal(t, http.StatusOK, code, body)
	})
}
