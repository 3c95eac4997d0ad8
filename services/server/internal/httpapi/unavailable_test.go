package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// serveAPI serves an API on pool until the test ends and returns a bundle
// whose requests go to it (its db is the one given, for tokens).
func serveAPI(t *testing.T, db *dbtest.DB, pool *pgxpool.Pool) *testBundle {
	t.Helper()
	log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	api := httpapi.New(&module.Deps{Pool: pool, Events: log, Rounds: postgres.CursorStore{}}, &httpapi.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	mux := http.NewServeMux()
	api.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &testBundle{db: db, base: srv.URL}
}

// TestAPI_DatabaseUnavailableIs503 shows that a database outage is answered
// 503 with Retry-After, not 500: a pool that cannot connect, a pool closed
// under the API (shutdown), and a connection the server terminated
// (SQLSTATE 57P01).
func TestAPI_DatabaseUnavailableIs503(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	token := (&testBundle{db: db}).principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	const body = `{"events":[{"type":"item.created"}]}`
	unavailable := func(t *testing.T, b *testBundle) {
		t.Helper()
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/spaces/s1/events", body},
			{"GET", "/v1/webhooks", ""},
		} {
			r := b.do(t, req.method, req.path, token, req.body)
			require.Contains(t, r.problem(t, http.StatusServiceUnavailable), "database is unavailable", "%s %s", req.method, req.path)
			require.Equal(t, "/v1/problems/unavailable", r.json(t)["type"])
			require.Equal(t, "5", r.header.Get("Retry-After"))
		}
	}

	t.Run("ConnectionRefused", func(t *testing.T) {
		pool, err := pgxpool.New(context.Background(), dbtest.UnreachableURL(t))
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		unavailable(t, serveAPI(t, db, pool))
	})
	t.Run("PoolClosedUnderTheAPI", func(t *testing.T) {
		pool, err := pgxpool.New(context.Background(), db.URL)
		require.NoError(t, err)
		b := serveAPI(t, db, pool)
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", token, body).status)
		pool.Close()
		unavailable(t, b)
	})
	t.Run("ServerTerminatedTheConnection", func(t *testing.T) {
		ctx := context.Background()
		pc, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		pc.MaxConns = 1
		// Hand out the idle connection as it is, as a pool does within a
		// second of its last use: the request meets the termination.
		pc.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := serveAPI(t, db, pool)
		for _, req := range []struct{ method, path, body string }{
			{"POST", "/v1/spaces/s1/events", body},
			{"GET", "/v1/webhooks", ""},
		} {
			var pid int
			require.NoError(t, pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			var ok bool
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ok))
			require.True(t, ok)
			r := b.do(t, req.method, req.path, token, req.body)
			r.problem(t, http.StatusServiceUnavailable)
			require.Equal(t, "5", r.header.Get("Retry-After"))
		}
		// The pool replaces the connection: the next request succeeds.
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", token, body).status)
	})
}
