package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/bothy/bothy/services/server/internal/authz"
)

type signInView struct {
	Next  string
	Error string
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request, _ *session) error {
	c.render(w, r, nil, http.StatusOK, "sign-in", &signInView{Next: safeNext(r.URL.Query().Get("next"))})
	return nil
}

// signIn exchanges a bearer token for a session: the token is checked as
// the API checks it, and the session rests on it (its scopes, its expiry,
// its revocation) for as long as it lasts.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request, _ *session) error {
	next := safeNext(r.PostFormValue("next"))
	subj, err := authz.Authenticate(r.Context(), c.pool, strings.TrimSpace(r.PostFormValue("token")))
	if errors.Is(err, authz.ErrUnauthenticated) {
		c.render(w, r, nil, http.StatusUnauthorized, "sign-in", &signInView{Next: next,
			Error: "That token is unknown, revoked or expired, or its principal is disabled."})
		return nil
	}
	if err != nil {
		return err
	}
	expires := time.Now().Add(c.cfg.SessionTTL)
	tok, err := authz.GetToken(r.Context(), c.pool, subj.TokenID)
	if err != nil {
		return err
	}
	if tok.ExpiresAt != nil && tok.ExpiresAt.Before(expires) {
		expires = *tok.ExpiresAt
	}
	value, err := c.createSession(r.Context(), &newSessionParams{TokenID: subj.TokenID, Principal: subj.Principal, ExpiresAt: expires})
	if err != nil {
		return err
	}
	if err := c.endPreviousSession(r.Context(), r); err != nil {
		return err
	}
	c.setCookie(w, r, value, expires)
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) error {
	if err := c.deleteSession(r.Context(), s); err != nil {
		return err
	}
	c.clearCookie(w, r)
	http.Redirect(w, r, Prefix+"sign-in", http.StatusSeeOther)
	return nil
}

// safeNext keeps a return address inside the console, so the sign-in
// form cannot be used to send a browser elsewhere.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.Contains(next, "..") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "subscriptions"
	}
	return next
}
