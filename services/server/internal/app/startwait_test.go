package app_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// TestServer_WaitsForTheDatabase: a server started while PostgreSQL is
// down keeps running, alive (/healthz) but not ready (/readyz, and the API
// answers 503), tries again with backoff and logs only when the reason
// changes; once the database is up it starts as usual and works: an
// append through the API, and the worker's consumers read it.
func TestServer_WaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	p := dbtest.NewPrivate(t, map[string]string{"shared_buffers": "32MB", "max_connections": "60"})
	ctx := context.Background()
	admin := p.Pool(t)
	token := apptest.Principal(t, admin, "alice", authz.RightWrite, "acme", apptest.AllScopes)
	admin.Close()
	require.NoError(t, p.Stop(ctx))

	logs := &recordedLogs{}
	base, done := runServer(t, apptest.Flags(p.URL, "all"), slog.New(logs))
	testwait.Until(t, 30*time.Second, func() bool {
		code, body := readyzIfUp(base)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "waiting for the database")
	}, "/readyz does not say that the server waits for the database")
	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "a waiting server is alive")
	status := apptest.CallAPI(t, base, http.MethodPost, "/v1/spaces/acme/events", token, appendBody(), nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	select {
	case err := <-done:
		t.Fatalf("the server stopped while the database was down: %v", err)
	default:
	}

	require.NoError(t, p.Start(ctx))
	testwait.Until(t, 60*time.Second, func() bool {
		code, _ := readyz(t, base)
		return code == http.StatusOK
	}, "the server did not become ready once the database was up")
	status = apptest.CallAPI(t, base, http.MethodPost, "/v1/spaces/acme/events", token, appendBody(), nil)
	require.Equal(t, http.StatusCreated, status)
	db := p.Pool(t)
	testwait.Until(t, 30*time.Second, func() bool {
		var behind bool
		require.NoError(t, db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_consumer_cursors
			WHERE last_seq < (SELECT max(seq) FROM event_log))`).Scan(&behind))
		return !behind
	}, "the worker's consumers did not read the appended event")

	waits := logs.waits()
	require.NotEmpty(t, waits, "the wait was not logged")
	for i := 1; i < len(waits); i++ {
		require.NotEqual(t, waits[i-1], waits[i], "a try that failed as the one before was logged again")
	}
	require.True(t, logs.has("the database answers: starting"))
}

// TestServer_RefusesConfigurationAtOnce: only an unreachable database is
// waited for. A database that refuses what the configuration asks (here a
// database name it does not have) stops the start with the key's name,
// and database.start_wait bounds the wait for one that does not answer.
func TestServer_RefusesConfigurationAtOnce(t *testing.T) {
	t.Parallel()
	t.Run("UnknownDatabase", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		u, err := dburl.WithDatabase(db.URL, "bothy_no_such_database")
		require.NoError(t, err)
		_, done := runServer(t, apptest.Flags(u, "worker"), slog.New(&recordedLogs{}))
		err = waitDone(t, done)
		require.ErrorContains(t, err, "database.url")
		require.ErrorContains(t, err, "3D000")
	})
	t.Run("StartWaitGivesUp", func(t *testing.T) {
		t.Parallel()
		flags := apptest.Flags(dbtest.UnreachableURL(t), "api")
		flags["database.start_wait"] = "1s"
		_, done := runServer(t, flags, slog.New(&recordedLogs{}))
		require.ErrorContains(t, waitDone(t, done), "database.start_wait")
	})
}

// runServer runs a server with every feature on a free loopback port
// until the test ends, then stops it, and returns its base URL (which may
// not listen yet) and the channel Run's result arrives on.
func runServer(t *testing.T, flags map[string]string, logger *slog.Logger) (string, <-chan error) {
	t.Helper()
	port, err := pgcluster.FreePort()
	require.NoError(t, err)
	flags["server.listen_addr"] = fmt.Sprintf("127.0.0.1:%d", port)
	cfg, err := config.Load("", nil, flags)
	require.NoError(t, err)
	srv := app.NewServer(cfg, logger, app.Features(cfg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		done <- srv.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	return "http://" + flags["server.listen_addr"], done
}

// waitDone returns Run's result, failing the test if it does not come.
func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		require.Error(t, err)
		return err
	case <-time.After(60 * time.Second):
		t.Fatal("the server waited instead of refusing to start")
		return nil
	}
}

func appendBody() map[string]any {
	return map[string]any{"events": []map[string]any{{"type": "item.created", "data": map[string]any{}}}}
}

// readyzIfUp returns the status and body of base's /readyz, or 0 while
// nothing listens there.
func readyzIfUp(base string) (int, string) {
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// recordedLogs is a slog handler that keeps every record's message and
// error attribute.
type recordedLogs struct {
	mu   gosync.Mutex
	recs []logRecord
}

type logRecord struct{ msg, err string }

func (l *recordedLogs) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordedLogs) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *recordedLogs) WithGroup(string) slog.Handler            { return l }
func (l *recordedLogs) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			rec.err = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, rec)
	return nil
}

// waits returns the errors of the "waiting for the database" records.
func (l *recordedLogs) waits() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		if r.msg == "waiting for the database" {
			out = append(out, r.err)
		}
	}
	return out
}

func (l *recordedLogs) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if r.msg == msg {
			return true
		}
	}
	return false
}
