package httpapi

import (
	"net/http"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/console/portallink"
)

// Portal links live at most this long, a tenth of that by default: a
// product that embeds the console makes one per page view.
const (
	defaultPortalLinkTTL = 10 * time.Minute
	maxPortalLinkTTL     = time.Hour
)

type createPortalLinkRequest struct {
	Principal string `json:"principal"`
	Space     string `json:"space"`
	// ExpiresInSeconds is the link's life. Default 600, at most 3600.
	ExpiresInSeconds *int64 `json:"expires_in_seconds"`
}

type portalLinkJSON struct {
	// URL opens the console as Principal, restricted to its
	// subscriptions on Space; Path is the same without scheme and host,
	// for a caller that knows the console's public address better.
	URL       string    `json:"url"`
	Path      string    `json:"path"`
	Principal string    `json:"principal"`
	Space     string    `json:"space"`
	ExpiresAt time.Time `json:"expires_at"`
}

// createPortalLink issues a signed, expiring console URL for one
// principal's webhook subscriptions on one space. The caller must manage
// webhooks on the space and be that principal or an admin of the space;
// the principal must have a right on it. The console's session rests on
// the caller's token: revoking it, or taking webhooks:manage on the space
// from it, ends every session opened with its links.
func (a *API) createPortalLink(w http.ResponseWriter, r *http.Request, s *authz.Subject) error {
	if len(a.cfg.ConsoleKey) == 0 {
		return errorf(http.StatusNotFound, kindNotFound, "the web console is off on this server (console.enabled)")
	}
	var req createPortalLinkRequest
	if err := decodeBody(w, r, a.cfg.MaxBodyBytes, &req, false); err != nil {
		return err
	}
	if req.Principal == "" || req.Space == "" {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "principal and space are required")
	}
	ttl := defaultPortalLinkTTL
	if req.ExpiresInSeconds != nil {
		if *req.ExpiresInSeconds < 1 || *req.ExpiresInSeconds > int64(maxPortalLinkTTL/time.Second) {
			return errorf(http.StatusUnprocessableEntity, kindInvalid, "expires_in_seconds: want 1..%d", int64(maxPortalLinkTTL/time.Second))
		}
		ttl = time.Duration(*req.ExpiresInSeconds) * time.Second
	}
	if err := a.allow(r, s, authz.ActionWebhookManage, req.Space); err != nil {
		return err
	}
	if req.Principal != s.Principal {
		right, err := authz.RightOn(r.Context(), a.pool, req.Space, s.Principal)
		if err != nil {
			return err
		}
		if !right.Includes(authz.RightAdmin) {
			return errorf(http.StatusForbidden, kindForbidden, "a portal link for another principal needs admin on space %q", req.Space)
		}
	}
	right, err := authz.RightOn(r.Context(), a.pool, req.Space, req.Principal)
	if err != nil {
		return err
	}
	if !right.Valid() {
		return errorf(http.StatusUnprocessableEntity, kindInvalid, "principal %q has no right on space %q", req.Principal, req.Space)
	}
	expires := time.Now().Add(ttl).Truncate(time.Second)
	token := portallink.Sign(a.cfg.ConsoleKey, &portallink.Claims{Principal: req.Principal, Space: req.Space,
		TokenID: s.TokenID, Expires: expires.Unix(), Nonce: portallink.NewNonce()})
	path := portallink.Path(token)
	base := a.cfg.ConsolePublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	writeJSON(w, http.StatusCreated, portalLinkJSON{URL: portallink.URL(base, token), Path: path, Principal: req.Principal,
		Space: req.Space, ExpiresAt: expires.UTC()})
	return nil
}
