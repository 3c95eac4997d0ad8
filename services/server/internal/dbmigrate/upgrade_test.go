package dbmigrate_test

import (
	"context"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbmigrate"
)

// files is a migration set for a test: file name to text.
func files(kv ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for i := 0; i < len(kv); i += 2 {
		fsys[kv[i]] = &fstest.MapFile{Data: []byte(kv[i+1])}
	}
	return fsys
}

// appliedVersions reads the bookkeeping table.
func appliedVersions(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	var vs []int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM bothy_schema_migrations`).Scan(&vs))
	return vs
}

func tableExists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok))
	return ok
}

// indexValid reports whether index exists and whether it is valid.
func indexValid(t *testing.T, pool *pgxpool.Pool, index string) (exists, valid bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(),
		`SELECT true, indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, index).Scan(&exists, &valid)
	if err != nil {
		return false, false
	}
	return exists, valid
}

func TestUp_RefusesAnEditedMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	landed := files(
		"0001_a.sql", "CREATE TABLE a (x int);",
		"0002_b.sql", "CREATE TABLE b (x int);",
	)
	setup := func(t *testing.T) *pgxpool.Pool {
		t.Helper()
		pool := emptyPool(t)
		_, err := dbmigrate.UpFS(ctx, pool, landed)
		require.NoError(t, err)
		return pool
	}

	t.Run("ChangedTextIsRefusedNamingTheFile", func(t *testing.T) {
		t.Parallel()
		pool := setup(t)
		edited := files(
			"0001_a.sql", "CREATE TABLE a (x int); -- a comment counts too",
			"0002_b.sql", "CREATE TABLE b (x int);",
			"0003_c.sql", "CREATE TABLE c (x int);",
		)
		_, err := dbmigrate.UpFS(ctx, pool, edited)
		require.ErrorIs(t, err, dbmigrate.ErrEdited)
		require.ErrorContains(t, err, "0001_a.sql was changed after it was applied")
		require.False(t, tableExists(t, pool, "c"), "nothing applied after the refusal")

		st, err := dbmigrate.GetStatusFS(ctx, pool, edited)
		require.NoError(t, err)
		require.ErrorContains(t, st.Check(), "0001_a.sql")
		require.False(t, st.Current())
		require.Len(t, st.Edited, 1)
	})
	for _, tc := range []struct {
		name    string
		files   fstest.MapFS
		wantErr string
	}{
		{"RenamedFileIsRefused", files("0001_a_renamed.sql", "CREATE TABLE a (x int);", "0002_b.sql", "CREATE TABLE b (x int);"),
			"0001_a_renamed.sql was applied as 0001_a.sql"},
		{"RemovedFileIsRefused", files("0002_b.sql", "CREATE TABLE b (x int);"),
			"0001_a.sql was applied but this binary has no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := dbmigrate.UpFS(ctx, setup(t), tc.files)
			require.ErrorIs(t, err, dbmigrate.ErrEdited)
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	t.Run("FileNumberedBelowAnAppliedOneIsRefused", func(t *testing.T) {
		t.Parallel()
		pool := setup(t)
		_, err := dbmigrate.UpFS(ctx, pool, files(
			"0001_a.sql", "CREATE TABLE a (x int);",
			"0002_b.sql", "CREATE TABLE b (x int);",
			"0004_d.sql", "CREATE TABLE d (x int);",
		))
		require.NoError(t, err)
		_, err = dbmigrate.UpFS(ctx, pool, files(
			"0001_a.sql", "CREATE TABLE a (x int);",
			"0002_b.sql", "CREATE TABLE b (x int);",
			"0003_c.sql", "CREATE TABLE c (x int);",
			"0004_d.sql", "CREATE TABLE d (x int);",
		))
		require.ErrorIs(t, err, dbmigrate.ErrOutOfOrder)
		require.ErrorContains(t, err, "0003_c.sql")
		require.False(t, tableExists(t, pool, "c"))
	})
	t.Run("NewerMigrationsOfARolledBackBinaryAreAccepted", func(t *testing.T) {
		t.Parallel()
		pool := setup(t)
		older := files("0001_a.sql", "CREATE TABLE a (x int);")
		res, err := dbmigrate.UpFS(ctx, pool, older)
		require.NoError(t, err)
		require.Empty(t, res.Applied)
		st, err := dbmigrate.GetStatusFS(ctx, pool, older)
		require.NoError(t, err)
		require.NoError(t, st.Check())
		require.True(t, st.Current())
		require.Equal(t, []dbmigrate.Record{{Version: 2, Name: "b", Checksum: st.Newer[0].Checksum}}, st.Newer)
	})
}

// concurrentIndexFiles is a table with rows and an index built on it
// concurrently.
var concurrentIndexFiles = files(
	"0001_t.sql", "CREATE TABLE t (x int); INSERT INTO t SELECT g FROM generate_series(1, 1000) g;",
	"0002_t_x.sql", dbmigrate.NoTransactionMarker+"\n-- why: a test\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_x ON t (x);\n",
)

func TestUp_RunsANoTransactionMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	res, err := dbmigrate.UpFS(ctx, pool, concurrentIndexFiles)
	require.NoError(t, err)
	require.Len(t, res.Applied, 2)
	exists, valid := indexValid(t, pool, "t_x")
	require.True(t, exists && valid)
	require.Equal(t, []int{1, 2}, appliedVersions(t, pool))
}

// TestUp_ConcurrentProcessesBuildAnIndexConcurrently: while one migrator
// builds an index concurrently, the others wait for its lock; waiting must
// not hold a snapshot the build waits for.
func TestUp_ConcurrentProcessesBuildAnIndexConcurrently(t *testing.T) {
	t.Parallel()
	u := emptyDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	upFromProcesses(t, ctx, u, 4, func(ctx context.Context, pool *pgxpool.Pool) (*dbmigrate.Result, error) {
		return dbmigrate.UpFS(ctx, pool, concurrentIndexFiles)
	})
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	defer pool.Close()
	exists, valid := indexValid(t, pool, "t_x")
	require.True(t, exists && valid)
}

// TestUp_DropsTheInvalidIndexOfAFailedConcurrentBuild: a unique index built
// concurrently over duplicate values fails and leaves an INVALID index. The
// next run, after the data is fixed, must build it again rather than keep
// the invalid one through IF NOT EXISTS.
func TestUp_DropsTheInvalidIndexOfAFailedConcurrentBuild(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	fsys := files(
		"0001_t.sql", "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2), (2);",
		"0002_t_x.sql", dbmigrate.NoTransactionMarker+"\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_x ON t (x);\n",
	)
	_, err := dbmigrate.UpFS(ctx, pool, fsys)
	require.ErrorContains(t, err, "apply 0002_t_x.sql")
	exists, valid := indexValid(t, pool, "t_x")
	require.True(t, exists && !valid, "the failed build left an invalid index")
	require.Equal(t, []int{1}, appliedVersions(t, pool))

	_, err = pool.Exec(ctx, `DELETE FROM t WHERE ctid = (SELECT max(ctid) FROM t WHERE x = 2)`)
	require.NoError(t, err)
	res, err := dbmigrate.UpFS(ctx, pool, fsys)
	require.NoError(t, err)
	exists, valid = indexValid(t, pool, "t_x")
	require.True(t, exists && valid, "the index was built again")
	require.Equal(t, []string{"t_x"}, res.DroppedInvalid)
	require.Equal(t, []int{1, 2}, appliedVersions(t, pool))
}

func TestUp_RefusesANoTransactionFileOfSeveralStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	_, err := dbmigrate.UpFS(ctx, pool, files(
		"0001_ab.sql", dbmigrate.NoTransactionMarker+"\nCREATE TABLE a (x int);\nCREATE TABLE b (x int);\n",
	))
	require.ErrorContains(t, err, "0001_ab.sql: a no-transaction migration holds exactly one statement")
	require.False(t, tableExists(t, pool, "a"), "nothing of the file ran")
	require.Empty(t, appliedVersions(t, pool))
}

// TestUp_FailureKeepsEarlierFilesApplied: each file is its own transaction,
// so a failing file stops the run there; the files before it stay applied
// and recorded, and the next run starts with the failed one.
func TestUp_FailureKeepsEarlierFilesApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := emptyPool(t)
	broken := files(
		"0001_a.sql", "CREATE TABLE a (x int);",
		"0002_b.sql", "CREATE TABLE b (x int);",
		"0003_c.sql", "CREATE TABLE c (x int); INSERT INTO c VALUES (1 / 0);",
		"0004_d.sql", "CREATE TABLE d (x int);",
	)
	res, err := dbmigrate.UpFS(ctx, pool, broken)
	require.ErrorContains(t, err, "apply 0003_c.sql")
	require.Len(t, res.Applied, 2)
	require.Equal(t, []int{1, 2}, appliedVersions(t, pool))
	require.True(t, tableExists(t, pool, "b"))
	require.False(t, tableExists(t, pool, "c"), "the failed file is rolled back as a whole")
	require.False(t, tableExists(t, pool, "d"))

	fixed := files(
		"0001_a.sql", "CREATE TABLE a (x int);",
		"0002_b.sql", "CREATE TABLE b (x int);",
		"0003_c.sql", "CREATE TABLE c (x int);",
		"0004_d.sql", "CREATE TABLE d (x int);",
	)
	res, err = dbmigrate.UpFS(ctx, pool, fixed)
	require.NoError(t, err)
	require.Len(t, res.Applied, 2)
	require.Equal(t, []int{1, 2, 3, 4}, appliedVersions(t, pool))
}

func TestLoad_NoTransactionMarker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, wantErr, wantIndex string
		wantNoTx                       bool
	}{
		{"PlainFileRunsInATransaction", "CREATE TABLE a (x int);", "", "", false},
		{"MarkerOnTheFirstLine", dbmigrate.NoTransactionMarker + "\r\nVACUUM a;", "", "", true},
		{"MarkerElsewhereIsRefused", "-- why\n" + dbmigrate.NoTransactionMarker + "\nVACUUM a;", "counts only as the first line", "", false},
		{"ConcurrentIndexNamesItsIndex", dbmigrate.NoTransactionMarker + "\n-- why\n\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS a_x ON a (x);", "", "a_x", true},
		{"QuotedIndexName", dbmigrate.NoTransactionMarker + "\ncreate index concurrently if not exists \"A x\" on a (x);", "", `"A x"`, true},
		{"ConcurrentIndexWithoutIfNotExistsIsRefused", dbmigrate.NoTransactionMarker + "\nCREATE INDEX CONCURRENTLY a_x ON a (x);", "IF NOT EXISTS name", "", true},
		{"ConcurrentIndexWithoutNameIsRefused", dbmigrate.NoTransactionMarker + "\nCREATE INDEX CONCURRENTLY ON a (x);", "IF NOT EXISTS name", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ms, err := dbmigrate.LoadFS(files("0001_a.sql", tt.text))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, "migration 0001_a.sql: ")
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantNoTx, ms[0].NoTransaction)
			require.Equal(t, tt.wantIndex, ms[0].Index)
		})
	}
}

func TestLoad_EmbeddedFilesHaveTheirChecksums(t *testing.T) {
	t.Parallel()
	ms, err := dbmigrate.Load()
	require.NoError(t, err)
	require.Equal(t, 1, ms[0].Version, "the baseline comes first")
	for _, m := range ms {
		require.Len(t, m.Checksum, 64, m.File())
	}
}
