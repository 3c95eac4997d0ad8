package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
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
)

// logBuffer is a log destination tests read while the server writes.
type logBuffer struct {
	mu  gosync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// records returns the JSON records whose msg is msg.
func (l *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader([]byte(l.String())))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "log line %s", sc.Bytes())
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// accessRecord waits for the access log record of the request with id.
// The server writes it after the answer is sent, so it may come a moment
// after the client has read the answer.
func (l *logBuffer) accessRecord(t *testing.T, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, rec := range l.records(t, "http request") {
			if rec["request_id"] == id {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access log record with request_id %q in:\n%s", id, l.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// startLogged runs the real server (role all) on db with a JSON logger at
// Debug level writing to logs, and returns its base URL.
func startLogged(t *testing.T, db *dbtest.DB, logs *logBuffer) string {
	t.Helper()
	cfg, err := config.Load("", nil, map[string]string{
		"database.url": db.URL, "server.role": "all", "server.listen_addr": "127.0.0.1:0",
		"server.admin_token": adminToken, "server.shutdown_timeout": "5s",
	})
	require.NoError(t, err)
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := app.NewServer(cfg, logger, app.Features(cfg))
	return apptest.Run(t, srv)
}

// TestAccessLog_NeverLogsCredentials shows the access log of the API: one
// record per request with method, route pattern, status, duration,
// principal and request id; the client's X-Request-Id is echoed when it is
// plain and replaced when it is not; and no credential the requests carried
// (a valid bearer token, an unknown one, the admin token as bearer and as
// Basic password) appears anywhere in the server's log at Debug level.
func TestAccessLog_NeverLogsCredentials(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	logs := &logBuffer{}
	base := startLogged(t, db, logs)
	b := &testBundle{db: db, base: base}
	token := b.principal(t, "alice", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	const unknownToken = "bothy_unknown-token-that-must-not-be-logged-0123456789"

	req := func(method, path, body, requestID string, header ...string) *response {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		r, err := http.NewRequest(method, base+path, rd)
		require.NoError(t, err)
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		if requestID != "" {
			r.Header.Set("X-Request-Id", requestID)
		}
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return send(t, r)
	}

	t.Run("LogsTheRouteStatusPrincipalAndRequestID", func(t *testing.T) {
		r := req("POST", "/v1/spaces/s1/events", `{"events":[{"type":"item.created"}]}`, "client-req-0001", "Authorization", "Bearer "+token)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		require.Equal(t, "client-req-0001", r.header.Get("X-Request-Id"))
		rec := logs.accessRecord(t, "client-req-0001")
		require.Equal(t, "POST", rec["method"])
		require.Equal(t, "POST /v1/spaces/{space}/events", rec["route"])
		require.EqualValues(t, http.StatusCreated, rec["status"])
		require.Equal(t, "alice", rec["principal"])
		require.Greater(t, rec["duration"], 0.0)
	})

	t.Run("ReplacesARequestIDThatIsNotPlain", func(t *testing.T) {
		for _, bad := range []string{"two words", `quote"d`, "tab\tid", string(bytes.Repeat([]byte("a"), 129))} {
			r := req("GET", "/v1/webhooks", "", bad, "Authorization", "Bearer "+token)
			got := r.header.Get("X-Request-Id")
			require.NotEmpty(t, got)
			require.NotEqual(t, bad, got)
			rec := logs.accessRecord(t, got)
			require.Equal(t, "GET /v1/webhooks", rec["route"])
		}
		r := req("GET", "/healthz", "", "")
		require.NotEmpty(t, r.header.Get("X-Request-Id"), "a request without an id gets one")
	})

	t.Run("LogsNoCredential", func(t *testing.T) {
		r := req("GET", "/v1/webhooks", "", "unknown-token", "Authorization", "Bearer "+unknownToken)
		require.Equal(t, http.StatusUnauthorized, r.status)
		rec := logs.accessRecord(t, "unknown-token")
		require.EqualValues(t, http.StatusUnauthorized, rec["status"])
		require.NotContains(t, rec, "principal")

		r = req("GET", "/admin/river/", "", "admin-bearer", "Authorization", "Bearer "+adminToken)
		require.Equal(t, http.StatusOK, r.status)
		logs.accessRecord(t, "admin-bearer")
		r = req("GET", "/admin/river/", "", "admin-basic", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("ops:"+adminToken)))
		require.Equal(t, http.StatusOK, r.status)
		logs.accessRecord(t, "admin-basic")

		out := logs.String()
		for _, secret := range []string{token, unknownToken, adminToken, base64.StdEncoding.EncodeToString([]byte("ops:" + adminToken))} {
			require.NotContains(t, out, secret)
		}
	})
}
