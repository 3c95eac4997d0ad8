package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"riverqueue.com/riverui"

	"github.com/bothy/bothy/services/server/internal/accesslog"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbfault"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

//go:embed openapi/bothy.json
var openAPIDoc []byte

// AdminPrefix is where the River UI is mounted when server.admin_token is
// set.
const AdminPrefix = "/admin/river"

// Config configures the API.
type Config struct {
	// MaxBodyBytes bounds every request body. Default 1 MiB.
	MaxBodyBytes int64
	// AllowPrivateWebhookTargets accepts webhook URLs on loopback and
	// private addresses (webhooks.allow_private_targets). Default false.
	AllowPrivateWebhookTargets bool
	// WebhookLimits bound filters and subscription counts
	// (webhooks.max_*). Default: webhooks' defaults.
	WebhookLimits webhooks.Limits
	// WebhookTimeout bounds a test send as it bounds a delivery attempt
	// (webhooks.timeout). Default: webhooks' default.
	WebhookTimeout time.Duration
	// AllowPrivatePushEndpoints accepts push endpoints on private
	// addresses (push.allow_private_targets). Default false.
	AllowPrivatePushEndpoints bool
	// AdminToken guards AdminPrefix (server.admin_token); empty: no admin
	// paths. Default "".
	AdminToken string
	// VAPIDPublicKey is what GET /v1/push/vapid-public-key answers
	// (push.vapid_public_key); empty: that route answers 404, push is off.
	// Default "".
	VAPIDPublicKey string
	// ConsoleKey signs portal links of the web console (console.key, when
	// console.enabled); empty: POST /v1/portal-links answers 404.
	// Default empty.
	ConsoleKey []byte
	// ConsolePublicURL is the console's public address
	// (console.public_url): portal links are built from it. Empty: from
	// the request's Host.
	ConsolePublicURL string
	// EventsPollInterval is how often a long poll or an event stream reads
	// the log again by itself when the API has no watcher
	// (module.Deps.Appended), whose notices would wake it:
	// consumer.poll_interval. Default 1s.
	EventsPollInterval time.Duration
	// EventsHeartbeat is how often a quiet event stream sends a comment
	// line, so that proxies keep it open and a client notices a dead
	// connection. Default 15s.
	EventsHeartbeat time.Duration
	// AuthCacheTTL is how long a bearer token's subject and a principal's
	// right on a space are reused once read (server.auth_cache_ttl): a
	// revoked token or a removed right takes effect within it; a change
	// made through this process takes effect at once. 0 reads them for
	// every request. Default 0.
	AuthCacheTTL time.Duration
	// EventsRightsMaxAge is how long an event stream goes on with the
	// rights it read before it reads them again, so a revoke ends it
	// within about this long. Default 1s.
	EventsRightsMaxAge time.Duration
	// MaxEventWaitersPerToken bounds the long polls and event streams one
	// token has open in the process (server.max_event_waiters_per_token);
	// one more is answered 429. Default 100.
	MaxEventWaitersPerToken int
	// MaxEventWaiters bounds the long polls and event streams open in the
	// process (server.max_event_waiters). Default 10,000.
	MaxEventWaiters int
	// EventsStreamWriteTimeout ends an event stream whose write does not
	// progress for this long: a client that stopped reading
	// (server.event_stream_write_timeout). Default 30s.
	EventsStreamWriteTimeout time.Duration
	// EventsStreamSendBuffer is the kernel send buffer, in bytes, of an
	// event stream's connection, where the stream's unread output queues.
	// Default 128 KiB.
	EventsStreamSendBuffer int
	// Logger receives server-side errors. Default slog.Default().
	Logger *slog.Logger
}

// API serves /v1 and the admin paths. It is safe for concurrent use.
type API struct {
	pool     *pgxpool.Pool
	auth     *authz.Cache
	log      module.Events
	source   sync.EventSource
	rounds   sync.RoundBarrier
	status   sync.ConsumerStatusReader
	jobsIns  module.JobInserter
	registry *push.Registry
	cfg      Config
	// tester sends POST /v1/webhooks/{id}/test; testerErr is why it could
	// not be built.
	tester    *webhooks.Tester
	testerErr error
	// ui is the River UI handler once mounted; Run starts its caches.
	ui *riverui.Handler
	// barrier is the event log's durability barrier, its flushes shared
	// by concurrent reads; nil without an event log.
	barrier *sharedBarrier
	// reader and appended serve the event pull and stream.
	reader   sync.SpaceEventReader
	appended sync.AppendWatcher
	// waiters counts the open long polls and streams against their limits.
	waiters *waiters
	// stopping is closed when the server stops (Run's context ends): long
	// polls answer at once and streams end, so shutdown does not wait for
	// them.
	stopping     chan struct{}
	stoppingOnce gosync.Once
}

// Run starts the River UI's background caches (job counts and the like)
// while the server runs, if the UI is mounted, and returns nil once ctx is
// cancelled, after telling long polls and event streams to end.
func (a *API) Run(ctx context.Context) error {
	defer a.stoppingOnce.Do(func() { close(a.stopping) })
	if a.tester != nil {
		defer a.tester.Close()
	}
	if a.ui != nil {
		if err := a.ui.Start(ctx); err != nil {
			return fmt.Errorf("river ui: %w", err)
		}
	}
	<-ctx.Done()
	return nil
}

// New builds the API on d's pool, event log and job inserter.
func New(d *module.Deps, cfg *Config) *API {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 1<<20)
	c.EventsPollInterval = cmp.Or(c.EventsPollInterval, time.Second)
	c.EventsHeartbeat = cmp.Or(c.EventsHeartbeat, 15*time.Second)
	c.EventsRightsMaxAge = cmp.Or(c.EventsRightsMaxAge, time.Second)
	c.MaxEventWaitersPerToken = cmp.Or(c.MaxEventWaitersPerToken, 100)
	c.MaxEventWaiters = cmp.Or(c.MaxEventWaiters, 10_000)
	c.EventsStreamWriteTimeout = cmp.Or(c.EventsStreamWriteTimeout, 30*time.Second)
	c.EventsStreamSendBuffer = cmp.Or(c.EventsStreamSendBuffer, 128<<10)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var reg prometheus.Registerer = prometheus.NewRegistry() // kept by nobody
	if d.Registry != nil {
		reg = d.Registry
	}
	var barrier *sharedBarrier
	if d.Events != nil {
		barrier = newSharedBarrier(d.Events)
	}
	tester, testerErr := webhooks.NewTester(&webhooks.TesterConfig{AllowPrivateTargets: c.AllowPrivateWebhookTargets,
		Timeout: c.WebhookTimeout, Logger: c.Logger})
	return &API{pool: d.Pool, auth: authz.NewCache(d.Pool, &authz.CacheConfig{TTL: c.AuthCacheTTL}), log: d.Events, source: d.Source, rounds: d.Rounds, status: d.ConsumerStatus,
		jobsIns: d.Jobs, cfg: c,
		registry: push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: c.AllowPrivatePushEndpoints}),
		tester:   tester, testerErr: testerErr, reader: d.Reader, appended: d.Appended, stopping: make(chan struct{}),
		barrier: barrier, waiters: newWaiters(c.MaxEventWaitersPerToken, c.MaxEventWaiters, reg)}
}

// apiModule adapts API to module.Module: it has no consumers or workers, and
// builds the API when its routes are mounted.
type apiModule struct {
	deps *module.Deps
	cfg  Config
	api  *API
}

// NewModule returns the factory of the HTTP API.
func NewModule(cfg *Config) module.Factory {
	return func(d *module.Deps) (module.Module, error) {
		c := *cfg
		c.Logger = cmp.Or(c.Logger, d.Logger)
		return &apiModule{deps: d, cfg: c}, nil
	}
}

func (*apiModule) Consumers() []sync.Consumer                    { return nil }
func (*apiModule) RegisterWorkers(*river.Workers) []module.Queue { return nil }

func (m *apiModule) Routes(mux *http.ServeMux) {
	m.api = New(m.deps, &m.cfg)
	m.api.Routes(mux)
}

// Run implements module.Runner; in a role without routes there is nothing
// to run.
func (m *apiModule) Run(ctx context.Context) error {
	if m.api == nil {
		<-ctx.Done()
		return nil
	}
	return m.api.Run(ctx)
}

// route is one endpoint: "METHOD /path" as a ServeMux pattern.
type route struct {
	pattern string
	// public routes need no token.
	public bool
	// selfDurable GET handlers make what they show durable themselves
	// (answerDurably, or a.log.Durable before each part of a stream), so
	// wrap hands them the response as it is.
	selfDurable bool
	// shed, if set, may refuse a request before it is authenticated, with
	// the answer its handler would give (a long poll of a token that has
	// the most open already, waiters.go), so that refusing costs no query.
	shed    func(r *http.Request) error
	handler func(w http.ResponseWriter, r *http.Request, s *authz.Subject) error
}

// routes is every /v1 endpoint; the OpenAPI document must list exactly
// these.
func (a *API) routes() []route {
	return []route{
		{pattern: "GET /v1/openapi.json", public: true, handler: a.openAPI},

		{pattern: "POST /v1/spaces/{space}/events", handler: a.appendEvents},
		{pattern: "GET /v1/spaces/{space}/events", selfDurable: true, shed: a.shedWaiter, handler: a.listEvents},
		{pattern: "GET /v1/spaces/{space}/events/{id}", handler: a.getEvent},
		{pattern: "GET /v1/spaces/{space}/event-types", handler: a.listEventTypes},

		{pattern: "GET /v1/webhooks", handler: a.listWebhooks},
		{pattern: "POST /v1/webhooks", handler: a.createWebhook},
		{pattern: "GET /v1/webhooks/{id}", handler: a.getWebhook},
		{pattern: "PATCH /v1/webhooks/{id}", handler: a.updateWebhook},
		{pattern: "DELETE /v1/webhooks/{id}", handler: a.deleteWebhook},
		{pattern: "POST /v1/webhooks/{id}/test", handler: a.testWebhook},
		{pattern: "POST /v1/webhooks/{id}/preview", handler: a.previewWebhook},
		{pattern: "POST /v1/webhooks/{id}/disable", handler: a.disableWebhook},
		{pattern: "POST /v1/webhooks/{id}/enable", handler: a.enableWebhook},
		{pattern: "POST /v1/webhooks/{id}/rotate-secret", handler: a.rotateWebhookSecret},
		{pattern: "GET /v1/webhooks/{id}/deliveries", handler: a.listDeliveries},
		{pattern: "GET /v1/webhooks/{id}/deliveries/{seq}", handler: a.getDelivery},
		{pattern: "POST /v1/webhooks/{id}/deliveries/{seq}/resend", handler: a.resendDelivery},
		{pattern: "POST /v1/webhooks/{id}/recover", handler: a.recoverWebhook},
		{pattern: "GET /v1/webhooks/{id}/stats", handler: a.webhookStats},

		{pattern: "GET /v1/push/vapid-public-key", public: true, handler: a.vapidPublicKey},
		{pattern: "GET /v1/push/registrations", handler: a.listRegistrations},
		{pattern: "POST /v1/push/registrations", handler: a.createRegistration},
		{pattern: "GET /v1/push/registrations/{id}", handler: a.getRegistration},
		{pattern: "DELETE /v1/push/registrations/{id}", handler: a.deleteRegistration},
		{pattern: "GET /v1/spaces/{space}/push-preference", handler: a.getPreference},
		{pattern: "PUT /v1/spaces/{space}/push-preference", handler: a.putPreference},

		{pattern: "POST /v1/portal-links", handler: a.createPortalLink},

		{pattern: "GET /v1/consumers", handler: a.listConsumers},

		{pattern: "POST /v1/principals", handler: a.createPrincipal},
		{pattern: "GET /v1/principals", handler: a.listPrincipals},
		{pattern: "GET /v1/principals/{id}", handler: a.getPrincipal},
		{pattern: "POST /v1/principals/{id}/tokens", handler: a.createToken},
		{pattern: "GET /v1/principals/{id}/tokens", handler: a.listTokens},
		{pattern: "DELETE /v1/tokens/{id}", handler: a.revokeToken},
		{pattern: "GET /v1/spaces/{space}/members", handler: a.listMembers},
		{pattern: "PUT /v1/spaces/{space}/members/{principal}", handler: a.putMember},
		{pattern: "DELETE /v1/spaces/{space}/members/{principal}", handler: a.deleteMember},
	}
}

// Patterns lists the ServeMux patterns Routes mounts under /v1.
func (a *API) Patterns() []string {
	var out []string
	for _, rt := range a.routes() {
		out = append(out, rt.pattern)
	}
	return out
}

// fallbackPattern catches every /v1 request no route matches.
const fallbackPattern = "/v1/"

// allowedMethods lists the methods some route of mux serves r's path with.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if _, p := mux.Handler(&http.Request{Method: m, URL: r.URL, Host: r.Host}); p != "" && p != fallbackPattern {
			allow = append(allow, m)
		}
	}
	return allow
}

// Routes mounts the API on mux, and the River UI if an admin token is set.
func (a *API) Routes(mux *http.ServeMux) {
	for _, rt := range a.routes() {
		mux.Handle(rt.pattern, a.wrap(rt))
	}
	// Anything else under /v1 is a problem document too, not the mux's
	// plain-text 404. The methods allowed are looked up in mux itself when
	// a request comes, so routes other modules mount count as well.
	mux.HandleFunc(fallbackPattern, func(w http.ResponseWriter, r *http.Request) {
		allow := allowedMethods(mux, r)
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, r, errorf(http.StatusMethodNotAllowed, kindMethodNotAllowed, "%s %s: allowed methods are %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		writeProblem(w, r, errorf(http.StatusNotFound, kindNotFound, "no endpoint %s %s (see /v1/openapi.json)", r.Method, r.URL.Path))
	})
	if a.cfg.AdminToken != "" {
		a.mountAdmin(mux)
	}
}

// wrap serves rt: the edge's checks (query parameters the document lists
// for the operation, path and query values and JSON strings PostgreSQL can
// store; edge.go), the token, then the handler, whose reads answer once
// durable.
func (a *API) wrap(rt route) http.Handler {
	op := documented[rt.pattern]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkParams(r, rt.pattern, op); err != nil {
			a.fail(w, r, err)
			return
		}
		if rt.shed != nil {
			if err := rt.shed(r); err != nil {
				a.fail(w, r, err)
				return
			}
		}
		var subj *authz.Subject
		if !rt.public {
			s, err := a.authenticate(r)
			if err != nil {
				a.fail(w, r, err)
				return
			}
			accesslog.SetPrincipal(r.Context(), s.Principal)
			subj = s
		}
		if op != nil && op.body {
			if err := checkBodyText(w, r, a.cfg.MaxBodyBytes); err != nil {
				a.fail(w, r, err)
				return
			}
		}
		if r.Method != http.MethodGet || rt.public || rt.selfDurable {
			// Public routes show nothing from the database.
			if err := rt.handler(w, r, subj); err != nil {
				a.fail(w, r, err)
			}
			return
		}
		bw := newBufferedWriter()
		if err := rt.handler(bw, r, subj); err != nil {
			a.fail(w, r, err)
			return
		}
		a.answerDurably(w, r, bw)
	})
}

// answerDurably sends a read's answer once everything it may show is
// durable (sync.DurabilityBarrier): a read sees rounds' and producers'
// commits before their flush, and must not show what a crash can take back.
// Writes need no barrier: they end in a synchronous commit, which flushes
// the WAL past everything they could see.
func (a *API) answerDurably(w http.ResponseWriter, r *http.Request, bw *bufferedWriter) {
	if err := a.durable(r.Context()); err != nil {
		a.fail(w, r, err)
		return
	}
	bw.sendTo(w)
}

// durable returns once what this process read is durable
// (sync.DurabilityBarrier), sharing flushes with concurrent reads; an API
// built without an event log has none to wait for.
func (a *API) durable(ctx context.Context) error {
	if a.barrier == nil {
		return nil
	}
	return a.barrier.Durable(ctx)
}

func (a *API) authenticate(r *http.Request) (*authz.Subject, error) {
	if s, ok := subjectFrom(r.Context()); ok {
		return s, nil // served in-process (WithSubject)
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, errorf(http.StatusUnauthorized, kindUnauthenticated, "send Authorization: Bearer <token> (create one with bothy authz token create)")
	}
	scheme, cred, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(cred) == "" {
		return nil, errorf(http.StatusUnauthorized, kindUnauthenticated, "Authorization: want the Bearer scheme")
	}
	s, err := a.auth.Authenticate(r.Context(), strings.TrimSpace(cred))
	if errors.Is(err, authz.ErrUnauthenticated) {
		return nil, errorf(http.StatusUnauthorized, kindUnauthenticated, "the bearer token is unknown, revoked or expired, or its principal is disabled")
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fail writes err as a problem; an error that is not an *apiError is an
// internal one, logged with the request and answered without its text,
// unless the database is unavailable (dbfault.Unavailable): that is 503
// with Retry-After, which a client may retry as it is (appending events is
// idempotent by id).
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the client left
		}
		if dbfault.Unavailable(err) {
			a.cfg.Logger.WarnContext(r.Context(), "http api: database unavailable", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.Any("error", err))
			w.Header().Set("Retry-After", retryAfterUnavailable)
			writeProblem(w, r, errorf(http.StatusServiceUnavailable, kindUnavailable, "the database is unavailable; retry in a few seconds"))
			return
		}
		a.cfg.Logger.ErrorContext(r.Context(), "http api", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		ae = errorf(http.StatusInternalServerError, kindInternal, "internal error; the server log has the cause")
	}
	switch ae.status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="bothy"`)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterBusy())
	}
	writeProblem(w, r, ae)
}

func (a *API) openAPI(w http.ResponseWriter, r *http.Request, _ *authz.Subject) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
	return nil
}

// mountAdmin serves the River UI behind the admin token, accepted as a
// bearer token (scripts) or as the password of HTTP Basic authentication
// (browsers, which prompt for it).
func (a *API) mountAdmin(mux *http.ServeMux) {
	// The UI reads River's tables through a client of its own on the
	// pool: it needs no running client, and the API needs no more of River
	// than a job inserter.
	rc, err := river.NewClient(riverpgxv5.New(a.pool), &river.Config{Logger: a.cfg.Logger})
	if err != nil {
		a.cfg.Logger.Error("river ui disabled", slog.Any("error", err))
		return
	}
	ui, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(rc, nil),
		Logger:    a.cfg.Logger,
		Prefix:    AdminPrefix,
	})
	if err != nil {
		a.cfg.Logger.Error("river ui disabled", slog.Any("error", fmt.Errorf("riverui: %w", err)))
		return
	}
	a.ui = ui
	guarded := a.adminOnly(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			ui.ServeHTTP(w, r)
			return
		}
		bw := newBufferedWriter()
		ui.ServeHTTP(bw, r)
		a.answerDurably(w, r, bw)
	}))
	mux.Handle(AdminPrefix+"/", guarded)
	mux.Handle(AdminPrefix, http.RedirectHandler(AdminPrefix+"/", http.StatusMovedPermanently))
}

func (a *API) adminOnly(next http.Handler) http.Handler {
	want := []byte(a.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got string
		if _, pw, ok := r.BasicAuth(); ok {
			got = pw
		} else if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
			got = strings.TrimSpace(cred)
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="bothy admin", charset="UTF-8"`)
			writeProblem(w, r, errorf(http.StatusUnauthorized, kindUnauthenticated, "admin paths need server.admin_token (as bearer token, or as the password of HTTP Basic)"))
			return
		}
		if err := checkAdminText(w, r, a.cfg.MaxBodyBytes); err != nil {
			a.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
