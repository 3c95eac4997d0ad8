package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/internal/pgbin"
	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "dev", Summary: "run everything locally: database, all roles, a demo space, token and webhook receiver", Setup: setupDev})
}

const (
	devSpace     = "demo"
	devPrincipal = "demo"
	// devOperator is the principal of the admin token: an operator who
	// onboards tenants over HTTP.
	devOperator = "operator"
	// devLocalURL is the PostgreSQL a developer most likely runs; bothy dev
	// uses its own database on it.
	devLocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	devDBName   = "bothy_dev"
	// devPGPort is the private cluster's port, unless it is taken.
	devPGPort = 55432
)

// devDatabase is the PostgreSQL bothy dev runs on and how to let go of it.
type devDatabase struct {
	url  string
	what string
	// stop is nil when the database is the user's: bothy dev neither found
	// nor started it, and leaves it alone.
	stop func(ctx context.Context) error
	// ha, for a formation (--ha), tells how to watch it and lose its
	// primary; empty otherwise.
	ha string
}

// devFlags are the flags of bothy dev.
type devFlags struct {
	addr, dir, pgMode string
	events            int
	ha                bool
}

func setupDev(fs *pflag.FlagSet) func(context.Context, *call) error {
	f := &devFlags{}
	fs.StringVar(&f.addr, "addr", "", "address of the API (default 127.0.0.1:8080, or a free port if that is taken)")
	fs.StringVar(&f.dir, "dir", ".bothy-dev", "directory for the private PostgreSQL, if one is started")
	fs.IntVar(&f.events, "events", 3, "demo events appended at start")
	fs.StringVar(&f.pgMode, "postgres", "auto", "auto (127.0.0.1:5432, else a private cluster), local or private")
	fs.BoolVar(&f.ha, "ha", false, "run PostgreSQL as a pg_auto_failover formation (monitor, primary, synchronous standby) in DIR/ha, made anew; needs pg_autoctl")
	return func(ctx context.Context, c *call) error { return runDev(ctx, c, f) }
}

// runDev brings up a whole bothy on this machine: a database, the schema,
// the built-in webhook receiver and the server with every role, then a demo
// space, token and subscription to try at once. It runs until ctx ends.
func runDev(ctx context.Context, c *call, f *devFlags) error {
	out := &lockedWriter{w: c.stdout}
	chosen := devChosen(c)
	db, err := devDatabaseFor(ctx, c, f, chosen, out)
	if err != nil {
		return err
	}
	if db.stop != nil {
		defer db.release(ctx, c.stderr)
	}
	cfg, err := configureDev(c, f, chosen, db)
	if err != nil {
		return err
	}
	// The roles' records that say the database is unavailable become one
	// line per change on out, decided by a probe of the database.
	probe := func(ctx context.Context) error { return devPing(ctx, cfg.Database.URL) }
	logger := slog.New(newDevLogHandler(ctx, newLogger(cfg, c.stderr).Handler(),
		&devLogConfig{Out: out, Probe: probe, Interval: 500 * time.Millisecond, Grace: 30 * time.Second}))

	fmt.Fprintf(out, "bothy dev: PostgreSQL %s\n          %s\n", db.what, redactedURL(db.url))
	if err := app.Migrate(ctx, cfg, logger); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}

	rcv, err := startDevReceiver(out)
	if err != nil {
		return err
	}
	defer rcv.close()
	return serveDev(ctx, cfg, logger, rcv, f.events, db.ha, out)
}

// devChosen returns whether the user chose a configuration key's value by
// flag or environment. It looks at the flags as parsed, before bothy dev
// sets any of its own.
func devChosen(c *call) func(key string) bool {
	visited := map[string]bool{}
	c.fs.Visit(func(f *pflag.Flag) { visited[f.Name] = true })
	return func(key string) bool {
		return visited[key] || lookupEnv(c.environ, config.EnvName(key)) != ""
	}
}

// devDatabaseFor returns the database the user configured (by flag,
// environment or config file), or else the one findDevDatabase finds or
// starts as --postgres says.
func devDatabaseFor(ctx context.Context, c *call, f *devFlags, chosen func(string) bool, out io.Writer) (*devDatabase, error) {
	userDB := chosen("database.url")
	if !userDB {
		if cfg, err := c.load(); err == nil {
			if _, src := cfg.Value("database.url"); src != config.SourceDefault {
				userDB = true // from the config file
			}
		}
	}
	switch {
	case userDB && f.ha:
		return nil, fmt.Errorf("%w: --ha starts its own PostgreSQL formation; unset database.url (BOTHY_DATABASE_URL, --database.url, the config file)", errUsage)
	case userDB:
		return &devDatabase{what: "from your configuration (BOTHY_DATABASE_URL, --database.url or the config file)"}, nil
	case f.ha:
		return startDevFormation(ctx, f.dir, out)
	}
	return findDevDatabase(ctx, f.pgMode, f.dir, out)
}

// release stops a database that bothy dev found or started, with time to do
// so even after ctx is cancelled.
func (d *devDatabase) release(ctx context.Context, stderr io.Writer) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.stop(sctx); err != nil {
		fmt.Fprintf(stderr, "bothy dev: stop PostgreSQL: %v\n", err)
	}
}

// configureDev sets the configuration bothy dev runs with and loads it: the
// database it found or started, the API on 127.0.0.1:8080 (or a free port if
// that is taken), every role, private webhook targets so the built-in
// receiver can be one, a fresh admin token and quiet logs. A value the user
// chose by flag or environment wins over each default.
func configureDev(c *call, f *devFlags, chosen func(string) bool, db *devDatabase) (*config.Config, error) {
	if db.stop != nil {
		if err := c.fs.Set("database.url", db.url); err != nil {
			return nil, err
		}
	}
	if db.ha != "" && !chosen("database.expect_synchronous_standby") {
		// The formation has a synchronous standby: its metric and alert
		// then mean something.
		if err := c.fs.Set("database.expect_synchronous_standby", "true"); err != nil {
			return nil, err
		}
	}
	for k, v := range map[string]string{
		"server.listen_addr":             devListenAddr(f.addr),
		"server.role":                    "all",
		"webhooks.allow_private_targets": "true",
		"server.admin_token":             randomToken(),
		"console.enabled":                "true",
		"console.key":                    randomToken() + randomToken(),
		"log.level":                      "warn",
	} {
		if chosen(k) {
			continue
		}
		if err := c.fs.Set(k, v); err != nil {
			return nil, err
		}
	}
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	if db.url == "" {
		db.url = cfg.Database.URL
	}
	return cfg, nil
}

// devListenAddr is --addr if given, else 127.0.0.1:8080 if it is free, else
// any free port.
func devListenAddr(addr string) string {
	if addr != "" {
		return addr
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		return "127.0.0.1:0"
	}
	ln.Close()
	return "127.0.0.1:8080"
}

// serveDev runs the server, creates the demo, tells the user how to use it
// and appends the demo events, then waits for ctx to end (a clean stop) or
// for the server to stop on its own (a failure).
func serveDev(ctx context.Context, cfg *config.Config, logger *slog.Logger, rcv *devReceiver, events int, ha string, out io.Writer) error {
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srv := app.NewServer(cfg, logger, app.Features(cfg))
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run(srvCtx) }()
	waitServer := func() error {
		stopServer()
		return <-runErr
	}
	apiAddr, err := devServerAddr(ctx, srv, runErr)
	if err != nil {
		return err
	}
	base := "http://" + apiAddr

	token, operatorToken, subID, err := devDemo(ctx, cfg, base, rcv)
	if err != nil {
		return errors.Join(err, waitServer())
	}
	printDevUsage(out, &devUsage{base: base, token: token, operatorToken: operatorToken, subID: subID, receiverURL: rcv.url,
		riverPassword: cfg.Server.AdminToken, databaseURL: cfg.Database.URL, console: cfg.Console.Enabled,
		allowPrivate: cfg.Webhooks.AllowPrivateTargets, ha: ha})
	if events > 0 {
		if err := appendDevEvents(ctx, base, token, events, out); err != nil {
			return errors.Join(err, waitServer())
		}
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\nbothy dev: stopping")
		err := waitServer()
		if err == nil {
			fmt.Fprintln(out, "bothy dev: stopped")
		}
		return err
	case err := <-runErr:
		if err == nil {
			err = errors.New("server stopped unexpectedly")
		}
		return err
	}
}

// devUsage is what the demo gave the user to try.
type devUsage struct {
	ha    string // how to watch the formation and lose its primary (--ha)
	base  string // the API's base URL
	token string // the demo principal's token
	// operatorToken is the admin token: the operator principal's, with
	// principals:manage and every other scope, to onboard tenants.
	operatorToken string
	subID         string // the demo webhook subscription
	receiverURL   string // the built-in receiver the subscription delivers to
	riverPassword string // the River UI's password (server.admin_token)
	databaseURL   string // for the bothy CLI in another terminal
	console       bool   // whether the web console is on
	// allowPrivate is webhooks.allow_private_targets, which the CLI on the
	// database must share to decide as the server does.
	allowPrivate bool
}

// printDevUsage tells the user where everything is and what to try first.
func printDevUsage(out io.Writer, u *devUsage) {
	curl := fmt.Sprintf(`curl -sS -X POST %s/v1/spaces/%s/events -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{"events":[{"type":"item.created","data":{"title":"hello from curl"}}]}'`,
		u.base, devSpace, u.token)
	var console string
	if u.console {
		console = fmt.Sprintf("  console     %s/console/   (sign in with a token below)\n", u.base)
	}
	fmt.Fprintf(out, `
bothy dev is running; Ctrl-C stops everything.

  API         %[1]s/v1/openapi.json   (the OpenAPI document of every /v1 endpoint)
  metrics     %[1]s/metrics
  River UI    %[1]s/admin/river/   (user admin, password %[2]s)
%[10]s  space       %[3]s, principal %[4]s (admin of the space)
  demo token  %[5]s
              the demo principal's, as a tenant's app holds one
              (scopes events:read events:write webhooks:manage push:manage ops:read)
  admin token %[12]s
              principal %[13]s's, to onboard tenants over HTTP: principals, their tokens, members of spaces
              (scopes %[14]s; admin of %[3]s)
  webhook     subscription %[6]s
              to the built-in receiver %[7]s, which checks every signature

Append an event and watch the receiver print it:

  %[8]s

See the subscription's deliveries and attempts:

  curl -sS %[1]s/v1/webhooks/%[6]s/deliveries -H 'Authorization: Bearer %[5]s'

Use the bothy CLI with this server, as the demo principal (in another terminal):

  export BOTHY_SERVER=%[1]s BOTHY_TOKEN=%[5]s
  bothy webhooks deliveries %[6]s --attempts

Onboard a tenant over HTTP with the admin token: a principal, admin of its own space, and its token:

  export BOTHY_SERVER=%[1]s BOTHY_TOKEN=%[12]s
  bothy principals create acme
  bothy members set --space acme --principal acme --right admin
  bothy tokens create --principal acme --scopes events:read,events:write,webhooks:manage

or use the CLI on the database, as an operator, with the server's setting for private targets:

  export BOTHY_DATABASE_URL='%[9]s' BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=%[11]t
  bothy consumers status

`, u.base, u.riverPassword, devSpace, devPrincipal, u.token, u.subID, u.receiverURL, curl, u.databaseURL, console, u.allowPrivate,
		u.operatorToken, devOperator, strings.Join(tokenScopes, " "))
	fmt.Fprint(out, u.ha)
}

// appendDevEvents appends n demo events through the API, as a client would,
// so the receiver has deliveries to print at once.
func appendDevEvents(ctx context.Context, base, token string, n int, out io.Writer) error {
	req := sync.AppendRequest{}
	for i := 1; i <= n; i++ {
		req.Events = append(req.Events, sync.NewEventRequest{Type: "item.created", Data: json.RawMessage(fmt.Sprintf(`{"title":"demo item %d"}`, i))})
	}
	var res sync.AppendResponse
	if err := newAPIClient(base, token).do(ctx, http.MethodPost, "/v1/spaces/"+devSpace+"/events", nil, &req, &res); err != nil {
		return fmt.Errorf("append demo events: %w", err)
	}
	fmt.Fprintf(out, "appended %d demo events (seq %d..%d); deliveries:\n", len(res.Events), res.Events[0].Seq, res.Events[len(res.Events)-1].Seq)
	return nil
}

// devServerAddr waits for the server's listener, or its early failure.
func devServerAddr(ctx context.Context, srv *app.Server, runErr <-chan error) (string, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		if a, err := srv.Addr(actx); err == nil {
			got <- a.String()
		}
	}()
	select {
	case a := <-got:
		return a, nil
	case err := <-runErr:
		if err == nil {
			err = errors.New("server stopped before it listened")
		}
		return "", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// devDemo creates the demo principal, its admin right on the demo space, a
// token, and (through the API, as a client would) a webhook subscription
// to the receiver; and the operator principal with its admin token.
// Subscriptions of earlier runs, whose receivers are gone, are disabled
// first.
func devDemo(ctx context.Context, cfg *config.Config, base string, rcv *devReceiver) (token, operatorToken, subID string, err error) {
	pool, err := app.OpenPool(ctx, cfg)
	if err != nil {
		return "", "", "", err
	}
	defer pool.Close()
	token, err = devPrincipalToken(ctx, pool, devPrincipal, "bothy dev", []string{authz.ScopeEventsRead, authz.ScopeEventsWrite,
		authz.ScopeWebhooksManage, authz.ScopePushManage, authz.ScopeOpsRead})
	if err != nil {
		return "", "", "", err
	}
	operatorToken, err = devPrincipalToken(ctx, pool, devOperator, "bothy dev admin", tokenScopes)
	if err != nil {
		return "", "", "", err
	}
	old, err := webhooks.List(ctx, pool, &webhooks.ListParams{Owner: devPrincipal, Space: devSpace})
	if err != nil {
		return "", "", "", err
	}
	for _, s := range old {
		if s.Status == webhooks.StatusActive {
			if err := webhooks.Disable(ctx, pool, s.ID, "replaced by a later bothy dev run"); err != nil {
				return "", "", "", err
			}
		}
	}
	var sub webhooks.SubscriptionView
	req := &webhooks.CreateRequest{Space: devSpace, URL: rcv.url}
	if err := newAPIClient(base, token).do(ctx, http.MethodPost, "/v1/webhooks", nil, req, &sub); err != nil {
		return "", "", "", fmt.Errorf("create demo webhook: %w", err)
	}
	if err := rcv.setSecret(sub.Secret); err != nil {
		return "", "", "", err
	}
	return token, operatorToken, sub.ID.String(), nil
}

// devPrincipalToken creates principal if it is new, makes it admin of the
// demo space and returns a new token of it with scopes. The admin token
// has every scope, principals:manage among them: a token hands out only
// scopes it carries, and the operator mints the tenants' tokens with it.
func devPrincipalToken(ctx context.Context, pool *pgxpool.Pool, principal, name string, scopes []string) (string, error) {
	if err := authz.CreatePrincipal(ctx, pool, principal, authz.KindUser); err != nil {
		return "", err
	}
	if err := authz.Grant(ctx, pool, &authz.GrantParams{Space: devSpace, Principal: principal, Right: authz.RightAdmin}); err != nil {
		return "", err
	}
	_, token, err := authz.CreateToken(ctx, pool, &authz.CreateTokenParams{Principal: principal, Name: name, Scopes: scopes})
	return token, err
}

// devReceiver is the built-in webhook receiver: it verifies each request
// with the Standard Webhooks library and prints it.
type devReceiver struct {
	url string
	srv *http.Server
	out io.Writer
	mu  gosync.Mutex
	wh  *standardwebhooks.Webhook
}

func startDevReceiver(out io.Writer) (*devReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("webhook receiver: %w", err)
	}
	r := &devReceiver{url: "http://" + ln.Addr().String() + "/webhook", out: out}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *devReceiver) setSecret(secret string) error {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("webhook secret: %w", err)
	}
	r.mu.Lock()
	r.wh = wh
	r.mu.Unlock()
	return nil
}

func (r *devReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	wh := r.wh
	r.mu.Unlock()
	if wh == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if err := wh.Verify(body, req.Header); err != nil {
		fmt.Fprintf(r.out, "  webhook REFUSED: %v (webhook-id %s)\n", err, req.Header.Get("webhook-id"))
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev struct {
		Seq   int64           `json:"seq"`
		Type  string          `json:"type"`
		Space string          `json:"space"`
		Actor string          `json:"actor"`
		Data  json.RawMessage `json:"data"`
	}
	_ = json.Unmarshal(body, &ev)
	fmt.Fprintf(r.out, "  webhook seq=%d type=%s space=%s actor=%s data=%s (signature verified, webhook-id %s)\n",
		ev.Seq, ev.Type, ev.Space, ev.Actor, ev.Data, req.Header.Get("webhook-id"))
	w.WriteHeader(http.StatusNoContent)
}

func (r *devReceiver) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
}

// findDevDatabase finds or starts a PostgreSQL, in this order: one on
// 127.0.0.1:5432 (user postgres), a private cluster from the local
// PostgreSQL binaries in dir. Containers are not started from here: the
// server binary carries no container code; the error says how to run one.
func findDevDatabase(ctx context.Context, mode, dir string, out io.Writer) (*devDatabase, error) {
	switch mode {
	case "auto", "local", "private":
	default:
		return nil, fmt.Errorf("%w: --postgres=%s: want auto, local or private", errUsage, mode)
	}
	var tried []string
	if mode == "auto" || mode == "local" {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		localErr := devPing(pctx, devLocalURL)
		cancel()
		if localErr == nil {
			return &devDatabase{url: devURL(devLocalURL, devDBName), what: "on 127.0.0.1:5432, database " + devDBName,
				stop: func(context.Context) error { return nil }}, nil
		}
		tried = append(tried, fmt.Sprintf("127.0.0.1:5432: %v", localErr))
	}
	if mode == "local" {
		return nil, fmt.Errorf("no PostgreSQL on 127.0.0.1:5432 (user postgres): %s", tried[0])
	}

	bin, err := pgbin.Server()
	if err == nil {
		db, err := startPrivatePG(ctx, bin, dir, out)
		if err == nil {
			return db, nil
		}
		tried = append(tried, fmt.Sprintf("private PostgreSQL from %s: %v", bin, err))
	} else {
		tried = append(tried, "local PostgreSQL binaries: "+err.Error())
	}
	if mode == "private" {
		return nil, fmt.Errorf("no private PostgreSQL: %s", tried[len(tried)-1])
	}
	return nil, fmt.Errorf(`no PostgreSQL found. Tried:
  - %s
Get one of these and run bothy dev again:
  - PostgreSQL on 127.0.0.1:5432 with user postgres and trust authentication
    (Debian/Ubuntu: sudo apt-get install postgresql; macOS: brew install postgresql && brew services start postgresql)
  - the PostgreSQL server binaries (initdb, pg_ctl) installed, then bothy dev starts its own in %s
  - with Docker: docker run --rm -d -p 127.0.0.1:5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16-alpine
  - or point it at any PostgreSQL: BOTHY_DATABASE_URL=postgres://user:pass@host:5432/bothy bothy dev`,
		strings.Join(tried, "\n  - "), dir)
}

func devPing(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

func devURL(base, db string) string {
	i := strings.LastIndex(base, "/")
	q := ""
	if j := strings.Index(base[i:], "?"); j >= 0 {
		q = base[i+j:]
	}
	return base[:i+1] + db + q
}

// startPrivatePG starts (creating it the first time) a cluster in
// dir/pgdata on devPGPort, or another port if that is taken, listening on
// 127.0.0.1 only with trust authentication for user postgres.
func startPrivatePG(ctx context.Context, bin, dir string, out io.Writer) (*devDatabase, error) {
	c, err := pgcluster.New(ctx, &pgcluster.Config{Dir: dir, Bin: bin, Port: devPGPort})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "bothy dev: starting a private PostgreSQL in %s ...\n", c.Data())
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port(), devDBName)
	return &devDatabase{url: url, what: fmt.Sprintf("private, started from %s in %s (log %s)", bin, c.Data(), c.LogFile()),
		stop: c.Stop}, nil
}

func randomToken() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func redactedURL(s string) string {
	u, err := pgx.ParseConfig(s)
	if err != nil || u.Password == "" {
		return s
	}
	return strings.Replace(s, ":"+u.Password+"@", ":xxxxx@", 1)
}

// lockedWriter serializes writes from the receiver and the command.
type lockedWriter struct {
	mu gosync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
