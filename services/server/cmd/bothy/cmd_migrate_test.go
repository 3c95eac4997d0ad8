package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/dburl"
)

// runCLIFor is runCLI with a deadline, for commands that would run until
// stopped (a server) if the refusal under test did not happen.
func runCLIFor(t *testing.T, d time.Duration, environ []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out, errOut bytes.Buffer
	code = run(ctx, args, &env{stdout: &out, stderr: &errOut, environ: environ})
	return code, out.String(), errOut.String()
}

// TestMigrate_RefusesAnEditedMigration: the database ran a text of
// 0001_baseline.sql other than the binary's (its recorded checksum differs),
// so migrate up, migrate status and server start refuse, naming the file.
func TestMigrate_RefusesAnEditedMigration(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	_, err := db.Pool.Exec(context.Background(),
		`UPDATE bothy_schema_migrations SET checksum = repeat('0', 64) WHERE version = 1`)
	require.NoError(t, err)
	environ := []string{"BOTHY_DATABASE_URL=" + db.URL, "BOTHY_LOG_LEVEL=warn"}
	const named = "0001_baseline.sql was changed after it was applied"

	code, _, stderr := runCLI(t, environ, "migrate", "up")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, named)

	code, stdout, stderr := runCLI(t, environ, "migrate", "status")
	require.Equal(t, 1, code)
	require.Contains(t, stdout, "edited   0001_baseline\n")
	require.Contains(t, stderr, named)

	for _, args := range [][]string{
		{"server", "--server.role=api", "--server.listen_addr=127.0.0.1:0"},
		{"server", "--server.role=worker", "--server.listen_addr=127.0.0.1:0", "--migrate"},
	} {
		code, _, stderr = runCLIFor(t, 30*time.Second, environ, args...)
		require.Equal(t, 1, code, "%v must refuse to start", args)
		require.Contains(t, stderr, named, "%v", args)
	}
}

// TestMigrateStatus_MissingDatabaseSaysWhatToRun: no database, or no
// server, is an answer that says what to run, not a driver error.
func TestMigrateStatus_MissingDatabaseSaysWhatToRun(t *testing.T) {
	t.Parallel()
	t.Run("DatabaseDoesNotExist", func(t *testing.T) {
		t.Parallel()
		u, err := dburl.NewURL(dbtest.ServerURL(t), "bothy_test_missing")
		require.NoError(t, err)
		code, stdout, stderr := runCLI(t, []string{"BOTHY_DATABASE_URL=" + u}, "migrate", "status")
		require.Equal(t, 1, code)
		require.Empty(t, stdout)
		require.Contains(t, stderr, `database "`+dburl.Name(u)+`" does not exist on 127.0.0.1:5432; create it and its schema with`)
		require.Contains(t, stderr, "    bothy migrate up\n")
		require.Contains(t, stderr, "createdb -h 127.0.0.1 -p 5432 -U postgres "+dburl.Name(u))
		require.NotContains(t, stderr, "SQLSTATE")
	})
	t.Run("NoServerAnswers", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(t, []string{"BOTHY_DATABASE_URL=" + dbtest.UnreachableURL(t)}, "migrate", "status")
		require.Equal(t, 1, code)
		require.Contains(t, stderr, "no PostgreSQL answers at 127.0.0.1:")
		require.Contains(t, stderr, "then bothy migrate up creates the database and its schema")
	})
}
