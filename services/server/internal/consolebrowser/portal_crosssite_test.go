package consolebrowser

import (
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// linkPage serves, from another site (localhost, where the console is
// 127.0.0.1), a page with link as a#go: a portal link in an e-mail, a
// chat or an attacker's page.
func linkPage(t *testing.T, link string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>news</title><a id="go" href="%s">read more</a>`, html.EscapeString(link))
	}))
	t.Cleanup(srv.Close)
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
}

// followFromOtherSite clicks link on another site's page and waits for one
// of the pages a portal link can end on: the confirmation, a signed-in
// page (the portal's subscriptions) or the sign-in form.
func followFromOtherSite(t *testing.T, b *Browser, link string) {
	t.Helper()
	b.Do(chromedp.Navigate(linkPage(t, link)), shows("#go"))
	b.Do(chromedp.Click(chromedp.ID("go")), shows(`#portal-open, #principal, #sign-in-submit`))
}

// TestConsole_PortalLinkFromOtherSite follows portal links from another
// site, where the browser leaves the console's SameSite=Strict cookie
// out. A browser signed in to the console is asked first, as when the
// link is typed in, and keeps its session if it stays; a browser without
// a session lands in the portal, not on the sign-in page.
func TestConsole_PortalLinkFromOtherSite(t *testing.T) {
	t.Parallel()
	f := setup(t)
	admin := f.principal(t, "acme-admin", authz.RightAdmin, "acme")
	f.principal(t, "carol", authz.RightWrite, "acme")

	t.Run("SignedInBrowserIsAskedFirst", func(t *testing.T) {
		b := New(t)
		signIn(f, b, f.aliceToken)
		followFromOtherSite(t, b, portalLink(t, f, admin, "carol"))
		b.Screenshot("portal-from-other-site-signed-in")
		require.Equal(t, 1, count(b, "#portal-open"), "the link opened at once: %q", heading(b))
		require.Contains(t, text(b, "#portal-question"), "signed in to the console as alice")
		b.Do(chromedp.Click(chromedp.ID("portal-cancel")), shows(`[data-testid="subscriptions"]`))
		require.Equal(t, "alice", text(b, `[data-testid="principal"]`), "the console session after staying")
		require.Zero(t, count(b, `[data-testid="portal-banner"]`))
	})

	t.Run("BrowserWithoutSessionOpensThePortal", func(t *testing.T) {
		b := New(t)
		followFromOtherSite(t, b, portalLink(t, f, admin, "carol"))
		b.Screenshot("portal-from-other-site")
		require.Equal(t, "Webhook subscriptions", heading(b))
		require.Equal(t, "carol", text(b, `[data-testid="principal"]`))
		require.Contains(t, text(b, `[data-testid="portal-banner"]`), "acme")
	})
}
