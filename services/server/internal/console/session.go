package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// cookieName is the session cookie; its value is the random session id.
const cookieName = "bothy_console"

// errNoSession is returned by loadSession for a missing, unknown or ended
// session: the browser signs in again.
var errNoSession = errors.New("no console session")

// session is a signed-in browser: the subject the console serves it as.
type session struct {
	idHash []byte
	// subject is what the API answers for; for a portal session its
	// scopes are narrowed to webhooks:manage on portalSpace, and
	// events:read there if its token has that.
	subject *authz.Subject
	// portalSpace is set for portal sessions: only the subject's own
	// subscriptions on this space are shown.
	portalSpace string
	csrfSecret  []byte
}

// newSessionParams describes a session to create.
type newSessionParams struct {
	TokenID     uuid.UUID
	Principal   string
	PortalSpace string
	ExpiresAt   time.Time
}

// insertSessionSQL inserts nothing if the token or the principal is gone.
const insertSessionSQL = `
INSERT INTO console_sessions (id_hash, token_id, principal, portal_space, csrf_secret, expires_at)
SELECT $1, t.id, p.id, NULLIF($4, ''), $5, $6 FROM tokens t, principals p WHERE t.id = $2 AND p.id = $3`

// pruneSessionsSQL removes ended sessions; it runs when a session is
// created, so the table holds about as many rows as there are live ones.
const pruneSessionsSQL = `DELETE FROM console_sessions WHERE expires_at < now()`

// createSession stores a new session and returns its cookie value, or
// errNoSession if its token or principal does not exist. Only the value's
// SHA-256 is stored.
func (c *Console) createSession(ctx context.Context, p *newSessionParams) (string, error) {
	id, csrf := make([]byte, 32), make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return "", fmt.Errorf("session id: %w", err)
	}
	if _, err := rand.Read(csrf); err != nil {
		return "", fmt.Errorf("csrf secret: %w", err)
	}
	value := base64.RawURLEncoding.EncodeToString(id)
	sum := sha256.Sum256([]byte(value))
	if _, err := c.pool.Exec(ctx, pruneSessionsSQL); err != nil {
		return "", fmt.Errorf("prune console sessions: %w", err)
	}
	ct, err := c.pool.Exec(ctx, insertSessionSQL, sum[:], p.TokenID, p.Principal, p.PortalSpace, csrf, p.ExpiresAt)
	if err != nil {
		return "", fmt.Errorf("create console session: %w", err)
	}
	if ct.RowsAffected() == 0 {
		return "", errNoSession
	}
	return value, nil
}

// loadSessionSQL reads a session with what decides whether it still
// stands: the session's expiry, its token (revoked, expired) and both
// principals (disabled). A token's scopes are read as they are now.
const loadSessionSQL = `
SELECT s.principal, coalesce(s.portal_space, ''), s.csrf_secret, s.token_id, t.scopes,
       s.expires_at > now() AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
       AND tp.disabled_at IS NULL AND p.disabled_at IS NULL
       -- a portal link for another principal needs its issuer to stay an admin of the space
       AND (s.portal_space IS NULL OR s.principal = t.principal OR EXISTS (
           SELECT 1 FROM space_members m
           WHERE m.space = s.portal_space AND m.principal = t.principal AND m."right" >= 'admin'))
FROM console_sessions s
JOIN tokens t ON t.id = s.token_id
JOIN principals tp ON tp.id = t.principal
JOIN principals p ON p.id = s.principal
WHERE s.id_hash = $1`

// loadSession returns the request's session, or errNoSession.
func (c *Console) loadSession(r *http.Request) (*session, error) {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" || len(ck.Value) > 64 {
		return nil, errNoSession
	}
	sum := sha256.Sum256([]byte(ck.Value))
	s := &session{idHash: sum[:], subject: &authz.Subject{}}
	var tokenScopes []string
	var valid bool
	err = c.pool.QueryRow(r.Context(), loadSessionSQL, sum[:]).Scan(&s.subject.Principal, &s.portalSpace, &s.csrfSecret,
		&s.subject.TokenID, &tokenScopes, &valid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNoSession
	}
	if err != nil {
		return nil, fmt.Errorf("read console session: %w", err)
	}
	if !valid {
		return nil, errNoSession
	}
	if tokenScopes == nil {
		tokenScopes = []string{}
	}
	s.subject.Scopes = tokenScopes
	if s.portalSpace != "" {
		// A portal session rests on the token that issued the link: it
		// lasts while that token still manages webhooks on the space, and
		// can do nothing else there or anywhere, but read the space's
		// events if the token may: a tenant debugging its receiver sees
		// the message each delivery sent. The API still decides each read
		// by the portal principal's own right on the space.
		if !authz.Covers(tokenScopes, authz.ScopeWebhooksManage, s.portalSpace) {
			return nil, errNoSession
		}
		s.subject.Scopes = []string{authz.ScopeWebhooksManage + "@" + s.portalSpace}
		if authz.Covers(tokenScopes, authz.ScopeEventsRead, s.portalSpace) {
			s.subject.Scopes = append(s.subject.Scopes, authz.ScopeEventsRead+"@"+s.portalSpace)
		}
		s.subject.Portal = true
	}
	return s, nil
}

// deleteSession ends a session (sign out).
func (c *Console) deleteSession(ctx context.Context, s *session) error {
	if _, err := c.pool.Exec(ctx, `DELETE FROM console_sessions WHERE id_hash = $1`, s.idHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// endPreviousSession deletes the session whose cookie the request
// carries, if any: a browser that signs in again or opens a portal link
// gets a new cookie, and the id it replaces must not stay valid.
func (c *Console) endPreviousSession(ctx context.Context, r *http.Request) error {
	ck, err := r.Cookie(cookieName)
	if err != nil || ck.Value == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(ck.Value))
	return c.deleteSession(ctx, &session{idHash: sum[:]})
}

// csrfToken is the token every form of the session carries.
func (s *session) csrfToken() string {
	m := hmac.New(sha256.New, s.csrfSecret)
	m.Write([]byte("bothy console csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the form's csrf field is the session's token.
func (s *session) checkCSRF(r *http.Request) bool {
	got := r.PostFormValue("csrf")
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.csrfToken())) == 1
}

// setCookie sets the session cookie: HttpOnly, SameSite=Strict, Secure
// when the request came over TLS or console.secure_cookies says a proxy
// terminates TLS, limited to the console's paths.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: Prefix, Expires: expires,
		HttpOnly: true, Secure: c.secureCookies(r), SameSite: http.SameSiteStrictMode})
}

// setFramedCookie sets the cookie of a portal session that another site
// frames. Browsers neither store nor send a SameSite=Strict cookie in a
// cross-site frame, so this one is SameSite=None, and therefore Secure,
// and Partitioned: the browser keeps it for the embedding site only. Its
// forms are still guarded by the CSRF token and the origin check.
func setFramedCookie(w http.ResponseWriter, value string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: value, Path: Prefix, Expires: expires,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteNoneMode, Partitioned: true})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, Secure: c.secureCookies(r), SameSite: http.SameSiteStrictMode})
}

// secureCookies says whether cookies get the Secure flag: the request
// came over TLS, or the configuration says a proxy in front terminates
// it. A client's X-Forwarded-Proto is not asked: anyone can send it.
func (c *Console) secureCookies(r *http.Request) bool {
	return r.TLS != nil || c.cfg.SecureCookies
}
