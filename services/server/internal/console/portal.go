package console

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/bothy/bothy/services/server/internal/console/portallink"
)

// portalSessionTTL bounds a portal session (and console.session_ttl, if
// shorter): a link is made for one page view of the embedding product, and
// the session it opens must not outlive that visit by the console's full
// session length.
const portalSessionTTL = time.Hour

// errLinkRefused is the one answer to a portal link that is malformed,
// forged, expired or already used: it never says which.
var errLinkRefused = errorf(http.StatusForbidden, "this portal link is invalid, expired or already used; ask for a new one")

// usedLinkMargin is how long past its expiry a used link's record is
// kept: Verify judges expiry by the clock of the server that opens the
// link, so the record must outlive the link on a clock a little behind.
const usedLinkMargin = 5 * time.Minute

type portalConfirmView struct {
	Token     string
	Principal string
	Space     string
}

// portalContinueView is the page that reloads a portal link followed
// from another site.
type portalContinueView struct {
	URL string
	// ReloadURL is where the page reloads itself to, once: empty when the
	// request is that reload and still came from another site (a browser
	// that says so even then), so the page waits for a click instead of
	// reloading forever.
	ReloadURL string
}

// reloadedParam marks the page's own reload of a portal link.
const reloadedParam = "reloaded"

// openPortal (GET /console/portal?token=...) exchanges a portal link for
// a portal session. A browser already signed in to the console is asked
// first (a page it cannot be framed in): opening the link ends that
// session. A browser without one, or with a portal session (a framed
// portal reopened on the next page view), opens it at once. HEAD uses
// nothing, and neither does a link followed from another site, which is
// reloaded from the console first (crossSiteNavigation).
func (c *Console) openPortal(w http.ResponseWriter, r *http.Request, _ *session) error {
	token := r.URL.Query().Get("token")
	claims, err := c.checkLink(r.Context(), token)
	if err != nil {
		c.allowFraming(w)
		return err
	}
	if r.Method == http.MethodHead {
		return nil // a look at the link (a link preview, say) does not use it
	}
	if crossSiteNavigation(r) {
		v := &portalContinueView{URL: Prefix + "portal?token=" + url.QueryEscape(token)}
		if r.URL.Query().Get(reloadedParam) == "" {
			v.ReloadURL = v.URL + "&" + reloadedParam + "=1"
		}
		c.render(w, r, nil, http.StatusOK, "portal-continue", v)
		return nil
	}
	s, err := c.loadSession(r)
	if err != nil && !errors.Is(err, errNoSession) {
		return err
	}
	if err == nil && s.portalSpace == "" {
		c.render(w, r, s, http.StatusOK, "portal-confirm",
			&portalConfirmView{Token: token, Principal: claims.Principal, Space: claims.Space})
		return nil
	}
	return c.startPortal(w, r, token, claims)
}

// crossSiteNavigation reports whether r is a top-level navigation that
// another site started (a link in an e-mail, a chat or another site's
// page), going by Fetch Metadata. Browsers leave the SameSite=Strict
// console cookie out of such a navigation and out of the redirects that
// follow it, so the console would see no session: it would open the link
// without asking a signed-in browser, and its redirect to the portal
// would land on the sign-in page. The page answered instead reloads the
// link from the console's own origin, which sends the cookie. A framed
// portal (Sec-Fetch-Dest iframe) and browsers without Fetch Metadata
// open the link as before.
func crossSiteNavigation(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Dest") != "document" {
		return false
	}
	site := r.Header.Get("Sec-Fetch-Site")
	return site == "cross-site" || site == "same-site"
}

// confirmPortal (POST /console/portal) opens the portal from the
// confirmation page; like sign-in it must come from the console itself.
func (c *Console) confirmPortal(w http.ResponseWriter, r *http.Request, _ *session) error {
	token := r.PostFormValue("token")
	claims, err := c.checkLink(r.Context(), token)
	if err != nil {
		return err
	}
	return c.startPortal(w, r, token, claims)
}

// checkLink verifies a link's signature and expiry and that it has not
// been used; it returns errLinkRefused otherwise.
func (c *Console) checkLink(ctx context.Context, token string) (*portallink.Claims, error) {
	claims, err := portallink.Verify(c.cfg.Key, token, time.Now())
	if errors.Is(err, portallink.ErrInvalid) {
		return nil, errLinkRefused
	}
	if err != nil {
		return nil, err
	}
	var used bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM console_portal_links_used WHERE link_hash = $1)`,
		linkHash(token)).Scan(&used); err != nil {
		return nil, fmt.Errorf("read used portal links: %w", err)
	}
	if used {
		return nil, errLinkRefused
	}
	return claims, nil
}

// startPortal uses the link up and starts its session: the link's
// principal, restricted to its space, resting on the token that issued
// it, for portalSessionTTL at most, or until that token stops managing
// webhooks on the space. The session the browser held before ends. Where
// console.frame_ancestors lets another site frame the portal, and cookies
// are Secure, the cookie is one a cross-site frame can keep
// (setFramedCookie).
func (c *Console) startPortal(w http.ResponseWriter, r *http.Request, token string, claims *portallink.Claims) error {
	c.allowFraming(w)
	if err := c.useLink(r.Context(), token, claims); err != nil {
		return err
	}
	expires := time.Now().Add(min(portalSessionTTL, c.cfg.SessionTTL))
	value, err := c.createSession(r.Context(), &newSessionParams{TokenID: claims.TokenID, Principal: claims.Principal,
		PortalSpace: claims.Space, ExpiresAt: expires})
	if errors.Is(err, errNoSession) {
		return errLinkRefused
	}
	if err != nil {
		return err
	}
	if err := c.endPreviousSession(r.Context(), r); err != nil {
		return err
	}
	if c.cfg.FrameAncestors != "'none'" && c.secureCookies(r) {
		setFramedCookie(w, value, expires)
	} else {
		c.setCookie(w, r, value, expires)
	}
	http.Redirect(w, r, Prefix+"subscriptions", http.StatusSeeOther)
	return nil
}

// useLink records a link as used, or returns errLinkRefused if it was
// already: of two browsers opening one link at once, one gets a session.
// Records of links past their expiry by usedLinkMargin on this server's
// clock (the one Verify uses, not the database's) are deleted on the way.
func (c *Console) useLink(ctx context.Context, token string, claims *portallink.Claims) error {
	if _, err := c.pool.Exec(ctx, `DELETE FROM console_portal_links_used WHERE expires_at < $1`,
		time.Now().Add(-usedLinkMargin)); err != nil {
		return fmt.Errorf("prune used portal links: %w", err)
	}
	ct, err := c.pool.Exec(ctx, `INSERT INTO console_portal_links_used (link_hash, expires_at) VALUES ($1, $2)
ON CONFLICT DO NOTHING`, linkHash(token), time.Unix(claims.Expires, 0))
	if err != nil {
		return fmt.Errorf("record used portal link: %w", err)
	}
	if ct.RowsAffected() == 0 {
		return errLinkRefused
	}
	return nil
}

func linkHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}
