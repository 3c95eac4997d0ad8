package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// portalLink has token issue a portal link for principal on space and
// returns its path.
func (b *testBundle) portalLink(t *testing.T, token, principal, space string) string {
	t.Helper()
	var link struct {
		Path string `json:"path"`
	}
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/portal-links", token,
		map[string]any{"principal": principal, "space": space}, &link))
	return link.Path
}

// TestConsole_PortalLinkOpensOnce: a portal link opens one session; opened
// again, by any browser, it is refused. A HEAD request (a link preview)
// does not use it, and two links issued in the same second for the same
// principal are two links, each good once.
func TestConsole_PortalLinkOpensOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightAdmin, "acme")
	link := b.portalLink(t, token, "alice", "acme")

	req, err := http.NewRequest(http.MethodHead, b.base+link, nil)
	require.NoError(t, err)
	p := b.browser(t).do(req)
	require.Equal(t, http.StatusOK, p.status)
	require.Empty(t, p.header.Get("Set-Cookie"))

	require.Equal(t, http.StatusSeeOther, b.browser(t).get(link).status)
	for range 2 {
		p := b.browser(t).get(link)
		require.Equal(t, http.StatusForbidden, p.status, "a used link opened again")
		require.Empty(t, p.header.Get("Set-Cookie"))
	}

	first, second := b.portalLink(t, token, "alice", "acme"), b.portalLink(t, token, "alice", "acme")
	require.NotEqual(t, first, second)
	require.Equal(t, http.StatusSeeOther, b.browser(t).get(first).status)
	require.Equal(t, http.StatusSeeOther, b.browser(t).get(second).status)
}

// TestConsole_PortalSessionIsShort: a portal session lasts an hour at
// most, not console.session_ttl (12 hours by default).
func TestConsole_PortalSessionIsShort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightAdmin, "acme")
	link := b.portalLink(t, token, "alice", "acme")
	// The session begins between opened and answered: its expiry is an hour
	// after a moment in between (the cookie's to the second).
	opened := time.Now()
	p := b.browser(t).get(link)
	answered := time.Now()
	require.Equal(t, http.StatusSeeOther, p.status)
	res := http.Response{Header: p.header}
	cookies := res.Cookies()
	require.Len(t, cookies, 1)
	expires := cookies[0].Expires
	require.False(t, expires.Before(opened.Add(time.Hour).Truncate(time.Second)), "the cookie's expiry %s", expires)
	require.False(t, expires.After(answered.Add(time.Hour)), "the cookie's expiry %s", expires)
	var expiresAt time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT max(expires_at) FROM console_sessions`).Scan(&expiresAt))
	require.False(t, expiresAt.Before(opened.Add(time.Hour)), "the session's expiry %s", expiresAt)
	require.False(t, expiresAt.After(answered.Add(time.Hour)), "the session's expiry %s", expiresAt)
}

// TestConsole_PortalAsksBeforeEndingASignedInSession: a browser signed in
// to the console that opens a portal link is asked first, on a page no
// other site can frame; the link stays unused until the viewer confirms,
// a confirmation from another origin is refused, and confirming ends the
// console session.
func TestConsole_PortalAsksBeforeEndingASignedInSession(t *testing.T) {
	t.Parallel()
	b := setup(t, "console.frame_ancestors", "https://app.example")
	token := b.principal(t, "alice", authz.RightAdmin, "acme")
	b.principal(t, "carol", authz.RightWrite, "acme")
	link := b.portalLink(t, token, "carol", "acme")
	br := b.browser(t)
	consoleSession := sessionID(t, br.signIn(token))

	p := br.get(link)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `id="portal-open"`)
	require.Contains(t, p.body, "carol")
	require.Empty(t, p.header.Get("Set-Cookie"))
	require.Contains(t, p.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.True(t, b.sessionValid(t, consoleSession), "asking changed nothing")
	require.NotContains(t, br.get("/console/subscriptions").body, `id="portal-banner"`)

	u, err := url.Parse(link)
	require.NoError(t, err)
	linkToken := u.Query().Get("token")
	req, err := http.NewRequest(http.MethodPost, b.base+"/console/portal", stringsReader(url.Values{"token": {linkToken}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	require.Equal(t, http.StatusForbidden, br.do(req).status)
	require.True(t, b.sessionValid(t, consoleSession))

	p = br.post("/console/portal", url.Values{"token": {linkToken}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.False(t, b.sessionValid(t, consoleSession), "the console session outlived the portal's confirmation")
	p = br.get("/console/subscriptions")
	require.Contains(t, p.body, `id="portal-banner"`)
	require.Equal(t, http.StatusForbidden, br.get(link).status, "the confirmed link is used")
}

// navigate GETs path as a browser following a link would, with Fetch
// Metadata site and dest.
func (br *browser) navigate(path, site, dest string) *page {
	br.t.Helper()
	req, err := http.NewRequest(http.MethodGet, br.base+path, nil)
	require.NoError(br.t, err)
	req.Header.Set("Sec-Fetch-Site", site)
	req.Header.Set("Sec-Fetch-Dest", dest)
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	return br.do(req)
}

// TestConsole_PortalLinkFromOtherSiteIsReloaded: a portal link followed
// from another site (or a sibling subdomain) answers a page that reloads
// it from the console, and does nothing else: no cookie, the browser's
// console session intact, the link still unused. Opened from the
// console's own origin, typed in, or in a frame, it opens at once.
func TestConsole_PortalLinkFromOtherSiteIsReloaded(t *testing.T) {
	t.Parallel()
	b := setup(t, "console.frame_ancestors", "https://app.example")
	token := b.principal(t, "alice", authz.RightAdmin, "acme")
	br := b.browser(t)
	consoleSession := sessionID(t, br.signIn(token))

	for _, site := range []string{"cross-site", "same-site"} {
		link := b.portalLink(t, token, "alice", "acme")
		for range 2 {
			p := br.navigate(link, site, "document")
			require.Equal(t, http.StatusOK, p.status, p.body)
			require.Contains(t, p.body, `<meta http-equiv="refresh" content="0; url=`+link+`&amp;reloaded=1">`)
			require.Contains(t, p.body, `id="portal-continue" href="`+link+`"`)
			require.Empty(t, p.header.Get("Set-Cookie"))
			require.Contains(t, p.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		}
		// A browser that calls the page's own reload cross-site too gets
		// the link to click, not another reload: no loop.
		p := br.navigate(link+"&reloaded=1", site, "document")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.NotContains(t, p.body, `http-equiv="refresh"`)
		require.Contains(t, p.body, `id="portal-continue" href="`+link+`"`)
		require.True(t, b.sessionValid(t, consoleSession), "the reload page ended the console session")
		p = br.navigate(link+"&reloaded=1", "same-origin", "document")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Contains(t, p.body, `id="portal-open"`, "reloaded from the console, the signed-in browser is asked")
		require.Equal(t, http.StatusSeeOther, b.browser(t).navigate(link, "same-origin", "document").status,
			"the link was used by the reload page")
	}

	for _, meta := range [][2]string{{"none", "document"}, {"cross-site", "iframe"}, {"", ""}} {
		p := b.browser(t).navigate(b.portalLink(t, token, "alice", "acme"), meta[0], meta[1])
		require.Equal(t, http.StatusSeeOther, p.status, "Sec-Fetch-Site %q, Sec-Fetch-Dest %q: %s", meta[0], meta[1], p.body)
		require.Equal(t, "/console/subscriptions", p.header.Get("Location"))
	}
}

// TestConsole_UsedLinkOutlivesDatabaseClock: the record of a used link is
// kept until the link has expired on the server's clock, which judges
// links, whatever the database's clock says. The record's expiry set a
// minute into the database's past stands for a database clock ahead of
// the server's.
func TestConsole_UsedLinkOutlivesDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightAdmin, "acme")
	link := b.portalLink(t, token, "alice", "acme")
	require.Equal(t, http.StatusSeeOther, b.browser(t).get(link).status)
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE console_portal_links_used SET expires_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	require.Equal(t, http.StatusSeeOther, b.browser(t).get(b.portalLink(t, token, "alice", "acme")).status,
		"another link opens (and prunes the used links)")
	require.Equal(t, http.StatusForbidden, b.browser(t).get(link).status, "the used link opened again")
}

// TestConsole_PortalShowsTheMessageToThoseWhoMayReadIt: a portal
// session shows a delivery's message (the event's data) when the token
// that issued its link may read the space's events (events:read) and the
// portal's principal may too; issued by a token without events:read, the
// page says the message is not shown and shows nothing of it.
func TestConsole_PortalShowsTheMessageToThoseWhoMayReadIt(t *testing.T) {
	t.Parallel()
	b := setup(t, "server.role", "all")
	carol := b.principal(t, "carol", authz.RightWrite, "acme")
	reader := b.principal(t, "alice", authz.RightAdmin, "acme", authz.ScopeWebhooksManage, authz.ScopeEventsRead)
	manager := b.principal(t, "dave", authz.RightAdmin, "acme", authz.ScopeWebhooksManage)
	rcv := newReceiver(t, http.StatusNoContent, "")
	id := b.createSubscription(t, carol, "acme", rcv.URL)
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/spaces/acme/events", carol,
		map[string]any{"events": []map[string]any{{"type": "item.created", "data": map[string]any{"order": "tenant-order-4711"}}}}, nil))
	path := "/console/subscriptions/" + id + "/deliveries/1"

	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.get(b.portalLink(t, reader, "carol", "acme")).status)
	var p *page
	require.Eventually(t, func() bool {
		p = br.get(path)
		return p.status == http.StatusOK && strings.Contains(p.body, `data-testid="attempt"`)
	}, 30*time.Second, 50*time.Millisecond, "waiting for the delivery's attempt")
	require.Contains(t, p.body, `id="portal-banner"`)
	require.Contains(t, p.body, `id="message-body"`)
	require.Contains(t, p.body, "tenant-order-4711")

	br = b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.get(b.portalLink(t, manager, "carol", "acme")).status)
	p = br.get(path)
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `id="message-missing"`)
	require.Contains(t, p.body, "events:read")
	require.NotContains(t, p.body, "tenant-order-4711")
}
