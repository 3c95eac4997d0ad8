package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestRiverUIShowsOnlyDurableState: the River UI lists jobs that rounds
// insert with asynchronous commits; like the API's reads it must not answer
// with a job that a crash then takes back.
func TestRiverUIShowsOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)
	b := &testBundle{base: startServer(t, p.URL, "api")}
	const jobs = "/admin/river/api/jobs?state=available&limit=5"

	// Warm up first (see TestReadsShowOnlyDurableState).
	_, err := pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	for range 2 {
		require.Equal(t, http.StatusOK, b.do(t, "GET", jobs, adminToken, "").status)
	}
	// As a round inserts its jobs: committed with synchronous_commit off.
	dbtest.CommitAsync(t, pool, `INSERT INTO river_job (kind, args, max_attempts) VALUES ('durability.probe', '{}', 1)`)

	res := b.do(t, "GET", jobs, adminToken, "")
	require.Equal(t, http.StatusOK, res.status, "body: %s", res.body)
	require.Contains(t, string(res.body), "durability.probe")

	pool = p.CrashAndReopen(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'durability.probe'`).Scan(&n))
	require.Equal(t, 1, n, "the River UI showed a job that the crash took back")
}
