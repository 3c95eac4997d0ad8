package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// consoleKey signs the portal links of the test servers.
const consoleKey = "console-key-for-tests-0123456789abcdef"

// testBundle is a running server on a scratch database: role api, so no
// deliveries are made unless a test asks for role all, and a small pool,
// as the tests share one PostgreSQL server.
type testBundle struct {
	db   *dbtest.DB
	base string
}

// setup starts the real server with the console on a fresh database.
func setup(t testing.TB, extra ...string) *testBundle {
	t.Helper()
	db := dbtest.NewDB(t)
	return &testBundle{db: db, base: startServer(t, db.URL, extra...)}
}

// startServer runs the server as "bothy server" builds it, console on,
// until the test ends; extra are configuration keys and values.
func startServer(t testing.TB, dbURL string, extra ...string) string {
	t.Helper()
	flags := apptest.Flags(dbURL, "api")
	flags["database.max_conns"] = "4"
	flags["console.enabled"] = "true"
	flags["console.key"] = consoleKey
	for i := 0; i+1 < len(extra); i += 2 {
		flags[extra[i]] = extra[i+1]
	}
	return apptest.Start(t, flags)
}

// principal creates a principal with right on space (none if right is
// "") and returns a bearer token with scopes (every scope if none given).
func (b *testBundle) principal(t testing.TB, id string, right authz.Right, space string, scopes ...string) string {
	t.Helper()
	if scopes == nil {
		scopes = apptest.AllScopes
	}
	return apptest.Principal(t, b.db.Pool, id, right, space, scopes)
}

// grant gives principal right on space.
func (b *testBundle) grant(t testing.TB, principal string, right authz.Right, space string) {
	t.Helper()
	require.NoError(t, authz.Grant(context.Background(), b.db.Pool, &authz.GrantParams{Space: space, Principal: principal, Right: right}))
}

// api sends a JSON request to the HTTP API with token and decodes a 2xx
// answer into out (if not nil); it returns the status.
func (b *testBundle) api(t testing.TB, method, path, token string, body, out any) int {
	t.Helper()
	return apptest.CallAPI(t, b.base, method, path, token, body, out)
}

// createSubscription creates a subscription to target on space with token
// and returns its id.
func (b *testBundle) createSubscription(t testing.TB, token, space, target string) string {
	t.Helper()
	var sub struct {
		ID string `json:"id"`
	}
	status := b.api(t, http.MethodPost, "/v1/webhooks", token, map[string]any{"space": space, "url": target}, &sub)
	require.Equal(t, http.StatusCreated, status)
	return sub.ID
}

// status reads a subscription's status through the API.
func (b *testBundle) status(t testing.TB, token, id string) string {
	t.Helper()
	var sub struct {
		Status string `json:"status"`
	}
	require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks/"+id, token, nil, &sub))
	return sub.Status
}

// browser is a client with a cookie jar that does not follow redirects,
// as a browser of the console.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
}

func (b *testBundle) browser(t testing.TB) *browser {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &browser{t: t, base: b.base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// page is an answer read whole.
type page struct {
	status int
	header http.Header
	body   string
}

// text is the page's markup without the <wbr> that URLs carry (where
// they may wrap), so a test finds a URL whole.
func (p *page) text() string { return strings.ReplaceAll(p.body, "<wbr>", "") }

func (br *browser) get(path string) *page {
	br.t.Helper()
	req, err := http.NewRequest(http.MethodGet, br.base+path, nil)
	require.NoError(br.t, err)
	return br.do(req)
}

// post sends a form as a browser on the console's own page would (Origin
// of the server).
func (br *browser) post(path string, form url.Values) *page {
	br.t.Helper()
	req, err := http.NewRequest(http.MethodPost, br.base+path, strings.NewReader(form.Encode()))
	require.NoError(br.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", br.base)
	return br.do(req)
}

func (br *browser) do(req *http.Request) *page {
	br.t.Helper()
	res, err := br.c.Do(req)
	require.NoError(br.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(br.t, err)
	return &page{status: res.StatusCode, header: res.Header, body: string(raw)}
}

// signIn signs the browser in with token and checks it lands on the
// subscriptions.
func (br *browser) signIn(token string) *page {
	br.t.Helper()
	p := br.post("/console/sign-in", url.Values{"token": {token}})
	require.Equal(br.t, http.StatusSeeOther, p.status, p.body)
	require.Equal(br.t, "/console/subscriptions", p.header.Get("Location"))
	return p
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf reads the CSRF token of a form on the page at path.
func (br *browser) csrf(path string) string {
	br.t.Helper()
	p := br.get(path)
	require.Equal(br.t, http.StatusOK, p.status, p.body)
	m := csrfField.FindStringSubmatch(p.body)
	require.NotNil(br.t, m, "no csrf field on %s", path)
	return m[1]
}

// receiver is the webhook test kit's receiver; URL is its base, under
// which every path is an endpoint.
type receiver struct {
	*webhookstest.Server
	URL string
}

// newReceiver is a webhook receiver that answers every request with
// status and body, as HTML.
func newReceiver(t testing.TB, status int, body string) *receiver {
	srv := recvtest.Start(t, nil)
	ans := webhookstest.Answer{Status: status, Body: body, Header: map[string]string{"Content-Type": "text/html"}}
	srv.SetDefaultRule(webhookstest.Always(ans))
	return &receiver{Server: srv, URL: srv.Base()}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
