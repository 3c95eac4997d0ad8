package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
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

// receiver is the kit's receiver with one endpoint: it answers 401 to a
// request that does not verify under the subscription's secret (setSecret)
// with the Standard Webhooks library, and 204 to the others.
type receiver struct {
	*webhookstest.Endpoint
	srv *webhookstest.Server
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	srv := recvtest.Start(t, nil)
	rv := &receiver{Endpoint: srv.Endpoint(""), srv: srv}
	rv.SetRule(webhookstest.Verified(webhookstest.Status(http.StatusNoContent)))
	return rv
}

func (rv *receiver) setSecret(t *testing.T, s string) {
	t.Helper()
	require.NoError(t, rv.SetSecret(s))
}

func (rv *receiver) url() string { return rv.srv.URL("") }

// verified are the requests that verified and were answered 2xx, in
// arrival order.
func (rv *receiver) verified() []webhookstest.Arrival {
	var out []webhookstest.Arrival
	for _, a := range rv.Arrivals() {
		if a.Verified && a.OK() {
			out = append(out, a)
		}
	}
	return out
}

// waitVerified waits until n verified deliveries arrived and returns them.
func (rv *receiver) waitVerified(t *testing.T, n int) []webhookstest.Arrival {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() bool { return len(rv.verified()) >= n },
		"%d verified deliveries (%d failed verification)", n, rv.BadSignatures())
	return rv.verified()
}

// waitFor waits until n verified deliveries arrived and returns their
// bodies.
func (rv *receiver) waitFor(t *testing.T, n int) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, a := range rv.waitVerified(t, n) {
		var env map[string]any
		_ = json.Unmarshal(a.Body, &env)
		out = append(out, env)
	}
	return out
}
