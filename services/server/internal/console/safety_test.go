package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestConsole_CSRF: a form POST without the session's CSRF token, with a
// wrong one or from another origin is refused and changes nothing.
func TestConsole_CSRF(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusNoContent, "")
	id := b.createSubscription(t, token, "acme", rcv.URL)
	br := b.browser(t)
	br.signIn(token)
	good := br.csrf("/console/subscriptions/" + id + "/confirm/disable")

	for name, form := range map[string]url.Values{
		"WithoutToken":   {"reason": {"x"}},
		"WithWrongToken": {"reason": {"x"}, "csrf": {good[:len(good)-2] + "AA"}},
	} {
		p := br.post("/console/subscriptions/"+id+"/disable", form)
		require.Equal(t, http.StatusForbidden, p.status, name)
		require.Equal(t, "active", b.status(t, token, id), name)
	}
	t.Run("FromAnotherOrigin", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, b.base+"/console/subscriptions/"+id+"/disable",
			stringsReader(url.Values{"csrf": {good}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		p := br.do(req)
		require.Equal(t, http.StatusForbidden, p.status)
		require.Equal(t, "active", b.status(t, token, id))
	})
	// A form another site posts arrives without the SameSite=Strict cookie:
	// it is refused, and its answer must not clear the cookie either, or
	// any site could sign the browser out of the console.
	t.Run("FromAnotherSiteLeavesTheSession", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, b.base+"/console/subscriptions/"+id+"/disable",
			stringsReader(url.Values{"csrf": {good}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		res, err := http.DefaultClient.Do(req) // no cookie jar: the browser sends no cookie cross-site
		require.NoError(t, err)
		_ = res.Body.Close()
		require.Equal(t, http.StatusForbidden, res.StatusCode)
		require.Empty(t, res.Header.Values("Set-Cookie"))
		require.Equal(t, http.StatusOK, br.get("/console/subscriptions").status, "still signed in")
	})
	// The create and edit forms take the same check: without the token
	// nothing is created or changed.
	t.Run("CreateAndEditForms", func(t *testing.T) {
		form := url.Values{"space": {"acme"}, "url": {rcv.URL + "/forged"}, "policy": {"unordered"}}
		require.Equal(t, http.StatusForbidden, br.post("/console/subscriptions/new", form).status)
		require.Equal(t, http.StatusForbidden, br.post("/console/subscriptions/"+id+"/edit", form).status)
		var list struct {
			Subscriptions []struct {
				Policy string `json:"policy"`
			} `json:"subscriptions"`
		}
		require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks", token, nil, &list))
		require.Len(t, list.Subscriptions, 1, "nothing was created")
		require.Equal(t, "ordered", list.Subscriptions[0].Policy, "nothing was changed")
	})
	t.Run("WithTheTokenItActs", func(t *testing.T) {
		p := br.post("/console/subscriptions/"+id+"/disable", url.Values{"csrf": {good}, "reason": {"maintenance"}})
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Equal(t, "disabled", b.status(t, token, id))
	})
}

// TestConsole_SecurityHeaders: every console answer forbids inline
// script and framing (portal pages excepted, see the portal tests).
func TestConsole_SecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	for _, path := range []string{"/console/sign-in", "/console/static/console.css", "/console/nothing-here"} {
		p := br.get(path)
		require.Equal(t, "default-src 'self'; base-uri 'none'; form-action 'self'; object-src 'none'; frame-ancestors 'none'",
			p.header.Get("Content-Security-Policy"), path)
		require.Equal(t, "no-store", p.header.Get("Cache-Control"), path)
		// Not no-referrer: then browsers send the console's own forms with
		// Origin "null", and the origin check depends on Fetch Metadata.
		require.Equal(t, "same-origin", p.header.Get("Referrer-Policy"), path)
	}
	require.Equal(t, http.StatusOK, br.get("/console/static/time.js").status)
	require.NotEqual(t, http.StatusOK, br.get("/console/static/").status, "no directory listing")
	br.signIn(token)
	p := br.get("/console/subscriptions")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, p.body, "<script>", "no inline script")
	require.NotContains(t, p.body, "style=", "no inline style")
}

// TestConsole_OddRequests: HEAD reads like GET (it changes nothing and
// needs no CSRF token), and a space that the API's router would redirect
// ("..") is a 404 page, not a redirect status without a Location.
func TestConsole_OddRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	br.signIn(token)
	req, err := http.NewRequest(http.MethodHead, b.base+"/console/subscriptions", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, br.do(req).status)
	for _, space := range []string{"..", "."} {
		p := br.get("/console/push?space=" + url.QueryEscape(space))
		require.Equal(t, http.StatusNotFound, p.status, "space %q: %s", space, p.body)
	}
}

// TestConsole_SecureCookies: the session cookie is Secure when
// console.secure_cookies says a proxy terminates TLS, and then a portal
// session where framing is allowed gets a cookie a cross-site frame can
// keep. A client's X-Forwarded-Proto decides nothing: anyone can send it.
func TestConsole_SecureCookies(t *testing.T) {
	t.Parallel()
	plain := setup(t)
	token := plain.principal(t, "alice", authz.RightWrite, "acme")
	p := signInWithHeader(t, plain, token, "X-Forwarded-Proto", "https")
	require.NotContains(t, p.header.Get("Set-Cookie"), "Secure", "X-Forwarded-Proto from the client")

	secure := setup(t, "console.secure_cookies", "true", "console.frame_ancestors", "https://app.example")
	token = secure.principal(t, "alice", authz.RightAdmin, "acme")
	p = signInWithHeader(t, secure, token, "", "")
	ck := p.header.Get("Set-Cookie")
	require.Contains(t, ck, "Secure")
	require.Contains(t, ck, "SameSite=Strict")

	link := secure.portalLink(t, token, "alice", "acme")
	p = secure.browser(t).get(link)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	ck = p.header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "Secure", "SameSite=None", "Partitioned"} {
		require.Contains(t, ck, want)
	}
}

// signInWithHeader posts the sign-in form with one more header (none if
// name is "") and returns the answer.
func signInWithHeader(t *testing.T, b *testBundle, token, name, value string) *page {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.base+"/console/sign-in", stringsReader(url.Values{"token": {token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if name != "" {
		req.Header.Set(name, value)
	}
	p := b.browser(t).do(req)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	return p
}
