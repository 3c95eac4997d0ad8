package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	gosync "sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

const adminToken = "admin-token-for-tests-0123456789"

// testBundle is a running server (role all, real database) and what the
// tests need to talk to it.
type testBundle struct {
	db   *dbtest.DB
	base string
}

// setup starts the real server, as "bothy server" builds it, on a fresh
// database and stops it when the test ends.
func setup(t *testing.T) *testBundle {
	t.Helper()
	db := dbtest.NewDB(t)
	return &testBundle{db: db, base: startServer(t, db.URL, "all")}
}

// startServer runs the server in role on the database at url until the
// test ends and returns its base URL; extra are configuration keys and
// values.
func startServer(t *testing.T, url, role string, extra ...string) string {
	t.Helper()
	flags := apptest.Flags(url, role)
	flags["server.admin_token"] = adminToken
	for i := 0; i+1 < len(extra); i += 2 {
		flags[extra[i]] = extra[i+1]
	}
	return apptest.Start(t, flags)
}

// principal creates a principal with a right on a space and returns a
// bearer token with scopes.
func (b *testBundle) principal(t *testing.T, id string, right authz.Right, space string, scopes ...string) string {
	t.Helper()
	return apptest.Principal(t, b.db.Pool, id, right, space, scopes)
}

// response is an answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r *response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return v
}

// problem checks that r is a problem document with status and returns its
// detail.
func (r *response) problem(t *testing.T, status int) string {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	p := r.json(t)
	require.EqualValues(t, status, p["status"])
	require.NotEmpty(t, p["type"])
	require.NotEmpty(t, p["title"])
	d, _ := p["detail"].(string)
	require.NotEmpty(t, d)
	return d
}

// do sends a request; body "" sends none. A JSON body gets its
// Content-Type.
func (b *testBundle) do(t *testing.T, method, path, token, body string) *response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) *response {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return &response{status: res.StatusCode, header: res.Header, body: body}
}

// receiver is a webhook receiver that verifies every request with the
// Standard Webhooks library and keeps the verified bodies.
type receiver struct {
	srv    *httptest.Server
	mu     gosync.Mutex
	secret string
	got    []map[string]any
	bad    int
	notify chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	rv := &receiver{notify: make(chan struct{}, 100)}
	rv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rv.mu.Lock()
		defer rv.mu.Unlock()
		wh, err := standardwebhooks.NewWebhook(rv.secret)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		if err != nil {
			rv.bad++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var env map[string]any
		_ = json.Unmarshal(body, &env)
		rv.got = append(rv.got, env)
		w.WriteHeader(http.StatusNoContent)
		rv.notify <- struct{}{}
	}))
	t.Cleanup(rv.srv.Close)
	return rv
}

func (rv *receiver) setSecret(s string) {
	rv.mu.Lock()
	rv.secret = s
	rv.mu.Unlock()
}

// waitFor waits until n verified deliveries arrived and returns them.
func (rv *receiver) waitFor(t *testing.T, n int) []map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		rv.mu.Lock()
		if len(rv.got) >= n {
			out := append([]map[string]any(nil), rv.got...)
			rv.mu.Unlock()
			return out
		}
		rv.mu.Unlock()
		select {
		case <-rv.notify:
		case <-deadline:
			rv.mu.Lock()
			have, bad := len(rv.got), rv.bad
			rv.mu.Unlock()
			t.Fatalf("waited for %d verified deliveries, have %d (%d failed verification)", n, have, bad)
		}
	}
}
