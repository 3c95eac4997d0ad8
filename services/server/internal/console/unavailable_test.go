package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/console"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestConsole_DatabaseUnavailableIs503: a page whose session cannot be
// read because the database cannot be reached is a 503 with Retry-After,
// not a 500.
func TestConsole_DatabaseUnavailableIs503(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), dbtest.UnreachableURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := console.New(pool, http.NewServeMux(), &console.Config{Key: []byte(strings.Repeat("k", console.MinKeyLen)),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	mux := http.NewServeMux()
	c.Routes(mux)

	req := httptest.NewRequest("GET", console.Prefix+"subscriptions", nil)
	req.AddCookie(&http.Cookie{Name: "bothy_console", Value: "some-session"})
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Equal(t, "5", rec.Header().Get("Retry-After"))
	require.Contains(t, rec.Body.String(), "database is unavailable")
}
