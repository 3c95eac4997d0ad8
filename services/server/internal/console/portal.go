package console

import (
	"errors"
	"net/http"
	"time"

	"github.com/bothy/bothy/services/server/internal/console/portallink"
)

// openPortal exchanges a portal link's token for a portal session: the
// link's principal, restricted to its space, resting on the token that
// issued it. The link itself is short-lived; the session lasts
// console.session_ttl, or until the issuing token stops managing webhooks
// on the space. Where console.frame_ancestors lets another site frame the
// portal, and where cookies are Secure, the cookie is one a cross-site frame can keep
// (setFramedCookie).
func (c *Console) openPortal(w http.ResponseWriter, r *http.Request, _ *session) error {
	c.allowFraming(w)
	claims, err := portallink.Verify(c.cfg.Key, r.URL.Query().Get("token"), time.Now())
	if errors.Is(err, portallink.ErrInvalid) {
		return errorf(http.StatusForbidden, "this portal link is invalid or has expired; ask for a new one")
	}
	if err != nil {
		return err
	}
	expires := time.Now().Add(c.cfg.SessionTTL)
	value, err := c.createSession(r.Context(), &newSessionParams{TokenID: claims.TokenID, Principal: claims.Principal,
		PortalSpace: claims.Space, ExpiresAt: expires})
	if errors.Is(err, errNoSession) {
		return errorf(http.StatusForbidden, "this portal link is invalid or has expired; ask for a new one")
	}
	if err != nil {
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
