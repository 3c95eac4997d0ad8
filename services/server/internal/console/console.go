package console

import (
	"cmp"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// MinKeyLen is the shortest signing key of portal links.
const MinKeyLen = 32

// Config configures the console.
type Config struct {
	// Key signs portal links (console.key); at least MinKeyLen bytes.
	// Required.
	Key []byte
	// FrameAncestors is the CSP frame-ancestors source list of portal
	// pages (console.frame_ancestors). Default "'none'".
	FrameAncestors string
	// SessionTTL bounds a signed-in session (console.session_ttl); a
	// session also ends with its token. Default 12h.
	SessionTTL time.Duration
	// SecureCookies marks cookies Secure on plain-HTTP requests
	// (console.secure_cookies), for a console behind a TLS-terminating
	// proxy. Requests over TLS get Secure cookies anyway.
	SecureCookies bool
	// Logger receives server-side errors. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if len(c.Key) < MinKeyLen {
		return fmt.Errorf("console.key: %d bytes, want at least %d (it signs portal links)", len(c.Key), MinKeyLen)
	}
	if strings.ContainsAny(c.FrameAncestors, ";,\r\n") {
		return fmt.Errorf("console.frame_ancestors %q: want a space-separated CSP source list", c.FrameAncestors)
	}
	return nil
}

// Console serves the web console. It is safe for concurrent use.
type Console struct {
	pool  *pgxpool.Pool
	api   http.Handler
	cfg   Config
	pages *pages
}

// New builds the console on pool (its sessions) and api, the handler that
// serves /v1: every page is what api answers for the session's subject.
func New(pool *pgxpool.Pool, api http.Handler, cfg *Config) (*Console, error) {
	c := *cfg
	c.FrameAncestors = cmp.Or(strings.TrimSpace(c.FrameAncestors), "'none'")
	c.SessionTTL = cmp.Or(c.SessionTTL, 12*time.Hour)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if err := c.validate(); err != nil {
		return nil, err
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Console{pool: pool, api: api, cfg: c, pages: p}, nil
}

// Routes mounts the console on mux under Prefix.
func (c *Console) Routes(mux *http.ServeMux) {
	static, _ := fs.Sub(staticFS, "static") // the directory is embedded
	mux.Handle("GET "+Prefix+"static/{file}", c.secure(http.StripPrefix(Prefix+"static/", http.FileServerFS(static))))
	mux.Handle("GET "+Prefix+"{$}", c.secure(http.RedirectHandler(Prefix+"subscriptions", http.StatusSeeOther)))
	mux.Handle("GET /console", http.RedirectHandler(Prefix, http.StatusMovedPermanently))
	mux.Handle("GET "+Prefix+"sign-in", c.secure(c.public(c.signInPage)))
	mux.Handle("POST "+Prefix+"sign-in", c.secure(c.public(c.signIn)))
	mux.Handle("GET "+Prefix+"portal", c.secure(c.public(c.openPortal)))
	mux.Handle("POST "+Prefix+"portal", c.secure(c.public(c.confirmPortal)))
	mux.Handle("POST "+Prefix+"sign-out", c.secure(c.signedIn(c.signOut)))
	mux.Handle("GET "+Prefix+"subscriptions", c.secure(c.signedIn(c.subscriptions)))
	mux.Handle("GET "+Prefix+"subscriptions/new", c.secure(c.signedIn(c.newSubscription)))
	mux.Handle("POST "+Prefix+"subscriptions/new", c.secure(c.signedIn(c.createSubscription)))
	mux.Handle("GET "+Prefix+"subscriptions/{id}", c.secure(c.signedIn(c.subscription)))
	mux.Handle("GET "+Prefix+"subscriptions/{id}/edit", c.secure(c.signedIn(c.editSubscription)))
	mux.Handle("POST "+Prefix+"subscriptions/{id}/edit", c.secure(c.signedIn(c.updateSubscription)))
	mux.Handle("GET "+Prefix+"subscriptions/{id}/deliveries/{seq}", c.secure(c.signedIn(c.delivery)))
	mux.Handle("GET "+Prefix+"subscriptions/{id}/confirm/{action}", c.secure(c.signedIn(c.confirm)))
	mux.Handle("POST "+Prefix+"subscriptions/{id}/{action}", c.secure(c.signedIn(c.act)))
	mux.Handle("GET "+Prefix+"lag", c.secure(c.signedIn(c.lag)))
	mux.Handle("GET "+Prefix+"push", c.secure(c.signedIn(c.push)))
	mux.Handle("POST "+Prefix+"push/preference", c.secure(c.signedIn(c.setPreference)))
	mux.Handle(Prefix, c.secure(c.signedIn(func(w http.ResponseWriter, r *http.Request, _ *session) error {
		return errorf(http.StatusNotFound, "no console page %s %s", r.Method, r.URL.Path)
	})))
}

// secure sets the headers of every console answer: a Content-Security-
// Policy that allows no inline script or style and no framing (portal
// pages: console.frame_ancestors), no caching, a referrer for the
// console's own requests only (a portal link's token is in its URL, and
// browsers then send the console's forms with their real Origin, which
// sameOrigin checks) and no content sniffing.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp("'none'"))
		h.Set("Cache-Control", "no-store")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

func csp(frameAncestors string) string {
	return "default-src 'self'; base-uri 'none'; form-action 'self'; object-src 'none'; frame-ancestors " + frameAncestors
}

// allowFraming lets a portal page be framed by console.frame_ancestors.
func (c *Console) allowFraming(w http.ResponseWriter) {
	w.Header().Set("Content-Security-Policy", csp(c.cfg.FrameAncestors))
}

// handlerFunc is a console page of a signed-in session.
type handlerFunc func(w http.ResponseWriter, r *http.Request, s *session) error

// signedIn serves h with the request's session, or sends the browser to
// sign in. Every POST must come from the console itself (Origin, when the
// browser sends it) and carry the session's CSRF token; otherwise it is
// refused with 403 before anything is done.
func (c *Console) signedIn(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := c.loadSession(r)
		if errors.Is(err, errNoSession) {
			if _, err := r.Cookie(cookieName); err == nil {
				c.clearCookie(w, r) // only a cookie the browser sent: another site must not sign it out
			}
			if !safeMethod(r) {
				c.fail(w, r, nil, errorf(http.StatusForbidden, "your console session has ended; sign in again"))
				return
			}
			http.Redirect(w, r, Prefix+"sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			c.fail(w, r, nil, err)
			return
		}
		if s.portalSpace != "" {
			c.allowFraming(w)
		}
		if !safeMethod(r) {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !sameOrigin(r) || !s.checkCSRF(r) {
				c.fail(w, r, s, errorf(http.StatusForbidden, "this form is stale or did not come from the console; reload the page and try again"))
				return
			}
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	})
}

// public serves a page that needs no session (sign-in, portal links).
// Its POSTs must come from the console itself, so another site cannot
// sign a browser in to a session of its choosing.
func (c *Console) public(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r) {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !sameOrigin(r) {
				c.fail(w, r, nil, errorf(http.StatusForbidden, "this form did not come from the console"))
				return
			}
		}
		if err := h(w, r, nil); err != nil {
			c.fail(w, r, nil, err)
		}
	})
}

// sameOrigin reports whether a browser's request came from a page of this
// host: Origin (or, without it, Sec-Fetch-Site) must not name another
// site. Clients that send neither are not browsers and are let through.
// With the console's Referrer-Policy (same-origin) browsers send the
// console's own forms with its origin; Origin "null" (an opaque origin,
// or a browser set to hide it) is accepted only with Sec-Fetch-Site
// same-origin.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "null" {
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	if o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Host == r.Host
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}

// safeMethod says whether r reads only: GET, and HEAD, which the GET
// patterns serve too.
func safeMethod(r *http.Request) bool {
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}
