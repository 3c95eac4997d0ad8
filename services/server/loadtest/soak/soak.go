// Package soak is the multi-process fault-injection soak: it
// proves that every committed event becomes exactly one job per consumer and
// target, that every event a producer was told is committed survives, and
// that nothing is lost, while worker processes are killed, their
// connections terminated and PostgreSQL crashed. The command perf/soak only
// calls Run; the code lives here because Go lets only packages under
// services/server import the server's internal packages.
//
//	go run ./perf/soak [--duration 2m] [--short] [--rate 40] [--producers 4] [--workers 3]
//	    [--pg-crash auto|on|off] [--pg-port N] [--seed N] [--keep] [--bin path]
//
// It runs PostgreSQL itself: a private cluster (package pgcluster) in a
// temporary directory, with settings that keep unflushed WAL in memory for
// up to 10 s, which it may crash. With BOTHY_DATABASE_URL set it uses that
// server instead (a scratch database, dropped at the end) and skips the
// crash, which it never does to a server it does not own. It builds the
// bothy binary of the module it runs in, starts --workers "bothy server
// --role=worker" processes and one --role=api process, local webhook
// receivers (healthy ones, and ones that answer 5xx, hold requests past
// webhooks.timeout or answer 410 for a while) and a local Web Push service
// that checks VAPID and decrypts every message. Producers append events
// through the producer API (postgres.EventLog.Write) and through POST
// /v1/spaces/{space}/events of the api process, some of their transactions
// rolled back on purpose, and record the seq and id of every event whose
// append succeeded. Faults are injected at random moments: SIGKILL of a
// worker and a restart, pg_terminate_backend of a worker's pool connections
// and of the LISTEN connections (found by application_name), crashes of
// the private cluster (pg_ctl -m immediate stop, then a start that recovers
// from the WAL: one with the workers frozen just before it, so only the
// producers' own flushes protect their acknowledged events, and in full
// mode one amid all traffic), and a right revoked mid-stream for a webhook
// owner and for a push receiver. Then it drains, verifies (among the checks: every
// acknowledged event is in the log at its seq with its id) and prints a
// table. The report keeps product violations (bothy broke a promise) apart
// from harness errors (the soak failed at something of its own: a fault it
// could not inject, a query of its own that timed out). Run returns
// ErrViolations if any product check failed, and ErrChecksHidden if none
// did but a harness error kept a check from running; a harness error that
// hides no check is reported and does not fail the run. The checks run on
// plain data (history), loaded from the database and the harness's records
// once the run is over, so each has a table test. The receivers count
// arrivals: a message that should have arrived and did not is a violation;
// a copy of a message already accepted (a duplicate arrival) is counted and
// attributed to the fault that hit the moment between the send and its
// record, and is a violation only when no fault explains it. For every
// SIGKILL it reports how soon other workers took over the jobs the killed
// worker was running (liveness locks; River's own rescue would take
// minutes) and how soon its webhook subscriptions got their next delivery. Everything listens
// and connects on 127.0.0.1 only, and every wait is bounded.
package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/app"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dburl"
	"github.com/bothy/bothy/services/server/internal/pgcluster"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testsweep"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// ErrViolations is returned when the run finished and at least one
// product check failed; the table says which.
var ErrViolations = errors.New("soak: violations found")

// ErrChecksHidden is returned when no product check failed but a harness
// error (a fault the soak could not inject, a table it could not read)
// kept a check from running; the report says which.
var ErrChecksHidden = errors.New("soak: checks not run because of harness errors")

type options struct {
	duration     time.Duration
	drainTimeout time.Duration
	short        bool
	rate         float64
	producers    int
	workers      int
	pgCrash      string
	pgPort       int
	seed         uint64
	keep         bool
	bin          string
}

func parseFlags(args []string, out io.Writer) (*options, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(out)
	o := &options{}
	fs.DurationVar(&o.duration, "duration", 2*time.Minute, "load and fault phase (the drain comes on top)")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 100*time.Second, "longest wait for the backlog to drain after the load")
	fs.BoolVar(&o.short, "short", false, "CI mode: --duration 20s --rate 20, faults early")
	fs.Float64Var(&o.rate, "rate", 40, "producer transactions per second, all producers together")
	fs.IntVar(&o.producers, "producers", 4, "concurrent producers")
	fs.IntVar(&o.workers, "workers", 3, "bothy server --role=worker processes (at least 3)")
	fs.StringVar(&o.pgCrash, "pg-crash", "auto", "crash the private cluster (once in --short, twice otherwise): auto (unless BOTHY_DATABASE_URL is set), on, off")
	fs.IntVar(&o.pgPort, "pg-port", 0, "port of the private cluster (0: a free port, chosen at start; runs in parallel need no setting)")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed for fault times (0: from the clock; printed)")
	fs.BoolVar(&o.keep, "keep", false, "keep the database (the private cluster's directory, or the scratch database) and the process logs")
	fs.StringVar(&o.bin, "bin", "", "use this bothy binary instead of building the module's")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.short {
		if !set["duration"] {
			o.duration = 20 * time.Second
		}
		if !set["drain-timeout"] {
			o.drainTimeout = 75 * time.Second
		}
		if !set["rate"] {
			o.rate = 20
		}
	}
	switch {
	case o.duration < 5*time.Second || o.duration > 24*time.Hour:
		return nil, fmt.Errorf("--duration %s: want 5s..24h", o.duration)
	case o.drainTimeout < 10*time.Second || o.drainTimeout > time.Hour:
		return nil, fmt.Errorf("--drain-timeout %s: want 10s..1h", o.drainTimeout)
	case o.rate <= 0 || o.rate > 2000:
		return nil, fmt.Errorf("--rate %v: want 0 < rate <= 2000", o.rate)
	case o.producers < 1 || o.producers > 64:
		return nil, fmt.Errorf("--producers %d: want 1..64", o.producers)
	case o.workers < 3 || o.workers > 8:
		return nil, fmt.Errorf("--workers %d: want 3..8", o.workers)
	case !slices.Contains([]string{"auto", "on", "off"}, o.pgCrash):
		return nil, fmt.Errorf("--pg-crash %q: want auto, on or off", o.pgCrash)
	case o.pgPort != 0 && (o.pgPort < 1024 || o.pgPort > 65535):
		return nil, fmt.Errorf("--pg-port %d: want 0 (a free port) or 1024..65535", o.pgPort)
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

// Spaces, principals and timing of the world the soak builds.
const (
	spaceA = "soak-a"
	spaceB = "soak-b"
	actor  = "soak-writer"
	// whTimeout is webhooks.timeout of the workers; the timeout receiver
	// holds requests for twice as long.
	whTimeout = time.Second
)

// harness is one run's state.
type harness struct {
	opts   *options
	out    io.Writer
	rng    *mrand.Rand
	rngMu  gosync.Mutex
	start  time.Time
	tmp    string
	bin    string
	dbURL  string
	pool   *pgxpool.Pool
	log    *postgres.EventLog
	vapid  push.VAPIDKeys
	env    []string
	logger *slog.Logger
	token  string // bearer token of actor, scope events:write
	httpc  *http.Client

	// cluster is the private cluster the soak runs and may crash; nil when
	// BOTHY_DATABASE_URL names the server.
	cluster    *pgcluster.Cluster
	clusterDir string
	// quiet is set while the workers are frozen before a crash; the
	// takeover watchers do not poll meanwhile.
	quiet atomic.Bool

	procMu   gosync.Mutex
	workers  []*proc // live workers
	allProcs []*proc
	api      *proc
	nextID   int
	killed   map[*proc]bool
	apiAddr  string

	// pushRevoked is set when pu-revoked lost its right; pushRevokedSeq is
	// the head read after the revocation committed.
	pushRevoked    bool
	pushRevokedSeq int64

	wh      *webhookReceivers
	targets []*target
	pr      *pushReceiver
	devices []*device

	prodMu gosync.Mutex
	// acked maps every event whose producer got success to the seq it was
	// told; ackedHTTP counts those appended through the api process.
	acked      map[uuid.UUID]int64
	ackedHTTP  int
	doubt      map[uuid.UUID]bool
	rolledBack map[uuid.UUID]bool
	// crashes records what every crash put at risk and what it lost.
	crashes    []crashResult
	rbBefore   int // transactions rolled back before the append
	rbAtCommit int // transactions whose commit failed on purpose after the append
	errsOther  int // producer errors from faults (commit in doubt)

	faultMu sync2Map
	// problems are the bothy processes' failures seen while running
	// (failed starts, unexpected exits, unclean stops, refused appends):
	// product violations. harnessErrs are the soak's own failures (a fault
	// it could not inject, a query of its own that failed).
	problems    []string
	harnessErrs []harnessError
	notesMu     gosync.Mutex

	// faultLog is every process or database fault with its moment, to
	// attribute duplicate arrivals; takeovers what each SIGKILL left and
	// when others took it over; freezes when the workers were stopped
	// (SIGSTOP) before a crash, which stretches a sender's time by as
	// much. measures waits for the takeover watchers.
	faultLogMu gosync.Mutex
	faultLog   []faultEvent
	takeovers  []takeover
	freezes    []freeze
	measures   gosync.WaitGroup
}

// sync2Map counts faults by kind.
type sync2Map struct {
	mu gosync.Mutex
	n  map[string]int
	x  map[string]int // extra figure per kind (backends terminated)
}

func (m *sync2Map) add(kind string, extra int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n, m.x = map[string]int{}, map[string]int{}
	}
	m.n[kind]++
	m.x[kind] += extra
}

// snapshot returns every kind's count and figure.
func (m *sync2Map) snapshot() map[string]faultCount {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]faultCount{}
	for k, n := range m.n {
		out[k] = faultCount{n: n, x: m.x[k]}
	}
	return out
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.out, "t+%5.1fs  %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

// problem records a failure of a bothy process: a product violation.
func (h *harness) problem(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	h.notesMu.Lock()
	h.problems = append(h.problems, s)
	h.notesMu.Unlock()
	h.logf("PROBLEM: %s", s)
}

// harnessErr records a failure of the soak itself. hides names the checks
// it leaves without what they need (none when a later attempt or another
// check covers it); the run fails only for those.
func (h *harness) harnessErr(hides []string, format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	h.notesMu.Lock()
	h.harnessErrs = append(h.harnessErrs, harnessError{text: s, hides: hides})
	h.notesMu.Unlock()
	h.logf("HARNESS ERROR: %s", s)
}

func (h *harness) randDur(lo, hi float64) time.Duration {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	d := float64(h.opts.duration)
	return time.Duration(d * (lo + (hi-lo)*h.rng.Float64()))
}

func (h *harness) randN(n int) int {
	h.rngMu.Lock()
	defer h.rngMu.Unlock()
	return h.rng.IntN(n)
}

// Run runs the soak with command-line args, writing progress and the table
// to stdout. It returns ErrViolations (wrapped) when a check failed and
// other errors when the run could not be done; the scratch database is
// dropped in every case unless --keep.
func Run(ctx context.Context, args []string, stdout io.Writer, environ []string) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	h := newHarness(o, stdout)
	external := externalURL(environ)
	if external != "" && o.pgCrash == "on" {
		return errors.New("--pg-crash on: the soak crashes only its own private cluster; unset BOTHY_DATABASE_URL")
	}
	h.printHeader()
	// Owned (testsweep): it holds the built binary the processes run, which
	// a later run stops, with the directory, if this one is killed.
	if h.tmp, err = testsweep.MkdirTemp("bothy-soak-"); err != nil {
		return err
	}
	defer h.removeTmp()
	closeDB, err := h.openDatabase(ctx, external)
	defer closeDB()
	if err != nil {
		return err
	}
	defer h.stopAll()

	if err := h.setup(ctx); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer h.closeSetup()
	if err := h.startProcs(ctx); err != nil {
		return err
	}
	h.logf("processes up: %s", h.procList())
	h.load(ctx)
	if ctx.Err() != nil {
		h.measures.Wait()
		return ctx.Err()
	}
	return h.drainAndVerify(ctx)
}

// newHarness is the state of a run with options o that writes to out.
func newHarness(o *options, out io.Writer) *harness {
	return &harness{opts: o, out: out, rng: mrand.New(mrand.NewPCG(o.seed, o.seed^0x5eed)), start: time.Now(),
		acked: map[uuid.UUID]int64{}, doubt: map[uuid.UUID]bool{}, rolledBack: map[uuid.UUID]bool{}, killed: map[*proc]bool{},
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)), httpc: &http.Client{Timeout: 20 * time.Second}}
}

// externalURL is the last non-empty BOTHY_DATABASE_URL of environ, or "".
func externalURL(environ []string) string {
	external := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "BOTHY_DATABASE_URL="); ok && v != "" {
			external = v
		}
	}
	return external
}

// printHeader writes the line that names the run's mode and figures.
func (h *harness) printHeader() {
	o := h.opts
	mode := "full"
	if o.short {
		mode = "short"
	}
	fmt.Fprintf(h.out, "soak (%s mode): %d workers + 1 api, %d producers at %.0f tx/s, load %s, seed %d\n",
		mode, o.workers, o.producers, o.rate, o.duration, o.seed)
}

// removeTmp removes the process logs' directory, or names it with --keep.
func (h *harness) removeTmp() {
	if h.opts.keep {
		_ = testsweep.Disown(h.tmp)
		fmt.Fprintf(h.out, "kept: process logs in %s\n", h.tmp)
	} else {
		_ = os.RemoveAll(h.tmp)
	}
}

// openDatabase starts the private cluster, or with external (the server
// BOTHY_DATABASE_URL names) picks a scratch database on it. The caller
// defers closeDB even when err is not nil: it stops the cluster, or drops
// the scratch database unless --keep.
func (h *harness) openDatabase(ctx context.Context, external string) (closeDB func(), err error) {
	if external == "" {
		if err := h.startCluster(ctx); err != nil {
			return h.stopCluster, fmt.Errorf("private cluster (set BOTHY_DATABASE_URL to run on another server, without the crash): %w", err)
		}
		fmt.Fprintf(h.out, "database: private cluster in %s, port %d (wal_writer_delay %s)\n",
			h.clusterDir, h.cluster.Port(), crashSettings["wal_writer_delay"])
		return h.stopCluster, nil
	}
	if h.dbURL, err = dburl.NewURL(external, "bothy_soak"); err != nil {
		return func() {}, fmt.Errorf("BOTHY_DATABASE_URL: %w", err)
	}
	fmt.Fprintf(h.out, "database: scratch database %s on BOTHY_DATABASE_URL's server\n", dburl.Name(h.dbURL))
	if h.opts.keep {
		return func() { fmt.Fprintf(h.out, "kept: database %s\n", dburl.Name(h.dbURL)) }, nil
	}
	return func() {
		if err := dburl.Drop(context.WithoutCancel(ctx), h.dbURL); err != nil {
			fmt.Fprintf(h.out, "soak: could not drop the scratch database: %v\n", err)
		}
	}, nil
}

// closeSetup closes what setup opened, in the reverse order.
func (h *harness) closeSetup() {
	h.pr.rcv.Close()
	h.wh.srv.Close()
	h.log.Close()
	h.pool.Close()
}

// load runs the producers and the fault schedule for --duration and waits
// for both.
func (h *harness) load(ctx context.Context) {
	loadCtx, stopLoad := context.WithTimeout(ctx, h.opts.duration)
	defer stopLoad()
	var wg gosync.WaitGroup
	for i := range h.opts.producers {
		wg.Add(1)
		go func() { defer wg.Done(); h.produce(loadCtx, i) }()
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); h.injectFaults(loadCtx) }()
	wg.Wait()
	<-faultsDone
}

// drainAndVerify waits for the backlog to drain, stops every process
// cleanly (part of the check), verifies and prints the table.
func (h *harness) drainAndVerify(ctx context.Context) error {
	h.logf("load done: %d acknowledged events; draining", len(h.acked))
	h.ensureWorkers(ctx)
	drained, drainTook := h.drain(ctx)
	h.measures.Wait()

	// A clean stop of every process still running is part of the check.
	for _, p := range h.liveProcs() {
		if err := p.stop(30 * time.Second); err != nil {
			h.problem("%v", err)
		}
	}
	rep := h.verify(ctx, drained, drainTook)
	fmt.Fprint(h.out, rep.String())
	if n := len(rep.violations); n > 0 {
		return fmt.Errorf("%w: %d (checks failed: %s)", ErrViolations, n, strings.Join(rep.failedChecks(), "; "))
	}
	if hidden := rep.hidden(); len(hidden) > 0 {
		return fmt.Errorf("%w: %s", ErrChecksHidden, strings.Join(hidden, "; "))
	}
	return nil
}

// setup creates and migrates the scratch database, connects, starts the
// receivers and seeds principals, rights, subscriptions and devices.
func (h *harness) setup(ctx context.Context) error {
	if err := h.openPool(ctx); err != nil {
		return err
	}
	h.log = postgres.NewEventLog(h.pool, nil)
	var err error
	if h.vapid, err = push.GenerateVAPIDKeys(); err != nil {
		return err
	}
	h.wh = newWebhookReceivers()
	h.pr = newPushReceiver(h.vapid.Public)

	if err := h.seedRights(ctx); err != nil {
		return err
	}
	if err := h.createTargets(ctx); err != nil {
		return err
	}
	if err := h.registerDevices(ctx); err != nil {
		return err
	}
	return h.prepareProcesses(ctx)
}

// openPool migrates the scratch database, connects the soak's own pool and
// creates the table whose deferred foreign key fails commits on purpose.
func (h *harness) openPool(ctx context.Context) error {
	cfg, err := config.Load("", nil, map[string]string{"database.url": h.dbURL})
	if err != nil {
		return err
	}
	if err := app.Migrate(ctx, cfg, h.logger); err != nil {
		return fmt.Errorf("migrate scratch database: %w", err)
	}
	pc, err := pgxpool.ParseConfig(h.dbURL)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(h.opts.producers + 4)
	pc.ConnConfig.RuntimeParams["application_name"] = "bothy-soak"
	if h.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		return err
	}
	// A table with a deferred foreign key: a producer that inserts a
	// dangling row fails at COMMIT, after its events were appended, so the
	// counter increment and the events roll back with it.
	_, err = h.pool.Exec(ctx, `
CREATE TABLE soak_parent (id int PRIMARY KEY);
CREATE TABLE soak_doomed (parent int REFERENCES soak_parent DEFERRABLE INITIALLY DEFERRED)`)
	return err
}

// seedRights creates the principals, grants their rights and creates the
// producers' bearer token.
func (h *harness) seedRights(ctx context.Context) error {
	for _, p := range []struct {
		id   string
		kind authz.PrincipalKind
	}{{actor, authz.KindApp}, {"owner-a", authz.KindUser}, {"owner-r", authz.KindUser},
		{"pu-1", authz.KindUser}, {"pu-2", authz.KindUser}, {"pu-flaky", authz.KindUser}, {"pu-revoked", authz.KindUser}} {
		if err := authz.CreatePrincipal(ctx, h.pool, p.id, p.kind); err != nil {
			return err
		}
	}
	grants := []authz.GrantParams{
		{Space: spaceA, Principal: actor, Right: authz.RightWrite}, {Space: spaceB, Principal: actor, Right: authz.RightWrite},
		{Space: spaceA, Principal: "owner-a", Right: authz.RightAdmin}, {Space: spaceB, Principal: "owner-a", Right: authz.RightAdmin},
		{Space: spaceB, Principal: "owner-r", Right: authz.RightAdmin},
		{Space: spaceA, Principal: "pu-1", Right: authz.RightRead}, {Space: spaceB, Principal: "pu-1", Right: authz.RightRead},
		{Space: spaceA, Principal: "pu-2", Right: authz.RightRead},
		{Space: spaceB, Principal: "pu-flaky", Right: authz.RightRead},
		{Space: spaceA, Principal: "pu-revoked", Right: authz.RightRead},
	}
	for i := range grants {
		if err := authz.Grant(ctx, h.pool, &grants[i]); err != nil {
			return err
		}
	}
	var err error
	_, h.token, err = authz.CreateToken(ctx, h.pool, &authz.CreateTokenParams{Principal: actor,
		Scopes: []string{authz.ScopeEventsWrite}, Name: "soak producers"})
	return err
}

// createTargets creates the webhook subscriptions the soak starts with.
func (h *harness) createTargets(ctx context.Context) error {
	for _, t := range []struct{ name, space, owner string }{
		{"healthy-a", spaceA, "owner-a"}, {"healthy-b", spaceB, "owner-a"},
		{"flaky-5xx", spaceA, "owner-a"}, {"slow-timeout", spaceB, "owner-a"},
		{"gone-410", spaceA, "owner-a"}, {"revoked-owner", spaceB, "owner-r"},
	} {
		if _, err := h.createTarget(ctx, t.name, t.space, t.owner); err != nil {
			return err
		}
	}
	return nil
}

// registerDevices adds the push devices to the local push service and
// registers them.
func (h *harness) registerDevices(ctx context.Context) error {
	reg := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	for _, d := range []*device{
		{name: "pu-1-phone", principal: "pu-1", spaces: []string{spaceA, spaceB}},
		{name: "pu-2-phone", principal: "pu-2", spaces: []string{spaceA}},
		{name: "pu-2-laptop", principal: "pu-2", spaces: []string{spaceA}},
		{name: "pu-flaky-phone", principal: "pu-flaky", spaces: []string{spaceB}},
		{name: "pu-revoked-phone", principal: "pu-revoked", spaces: []string{spaceA}},
	} {
		dev, endpoint, err := h.pr.rcv.AddDevice(d.name)
		if err != nil {
			return err
		}
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, dev.P256dh(), dev.Auth()
		r, err := reg.Register(ctx, h.pool, &push.RegisterParams{Principal: d.principal, Subscription: s, UserAgent: "soak"})
		if err != nil {
			return err
		}
		d.regID = r.ID
		h.pr.mu.Lock()
		h.pr.devices[d.name] = d
		h.pr.mu.Unlock()
		h.devices = append(h.devices, d)
	}
	return nil
}

// prepareProcesses builds the bothy binary unless --bin names one, and
// sets the bothy processes' environment.
func (h *harness) prepareProcesses(ctx context.Context) error {
	bin := h.opts.bin
	if bin == "" {
		h.logf("building bothy")
		wd, _ := os.Getwd()
		var err error
		if bin, err = buildBinary(ctx, wd, h.tmp); err != nil {
			return err
		}
	}
	h.bin = bin
	h.env = processEnv(map[string]string{
		"database.url": h.dbURL, "database.max_conns": "6", "server.listen_addr": "127.0.0.1:0",
		"server.shutdown_timeout": "10s", "consumer.batch_size": "25", "consumer.poll_interval": "250ms",
		"river.max_workers": "20", "webhooks.allow_private_targets": "true", "webhooks.timeout": whTimeout.String(),
		"push.vapid_public_key": h.vapid.Public, "push.vapid_private_key": h.vapid.Private,
		"push.allow_private_targets": "true", "log.level": "info",
	})
	return nil
}

// createTarget creates a webhook subscription pointing at a local receiver.
func (h *harness) createTarget(ctx context.Context, name, space, owner string) (*target, error) {
	t := &target{name: name, space: space, owner: owner, holdFor: 2 * whTimeout}
	h.wh.add(t)
	sub, secret, err := webhooks.Create(ctx, h.pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: owner, Space: space,
		URL: h.wh.url(name), AllowPrivateTargets: true})
	if err != nil {
		return nil, fmt.Errorf("create subscription %s: %w", name, err)
	}
	if err = t.ep.SetSecret(secret); err != nil {
		return nil, err
	}
	t.id, t.secret = sub.ID, secret
	t.mu.Lock()
	t.resumes = append(t.resumes, sub.ResumeAfterSeq)
	t.mu.Unlock()
	h.procMu.Lock()
	h.targets = append(h.targets, t)
	h.procMu.Unlock()
	return t, nil
}

func (h *harness) target(name string) *target {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	for _, t := range h.targets {
		if t.name == name {
			return t
		}
	}
	return nil
}

// processEnv is the environment of the bothy processes: this process's
// without any BOTHY_ variable, plus the given keys.
func processEnv(keys map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BOTHY_") {
			env = append(env, kv)
		}
	}
	for k, v := range keys {
		env = append(env, config.EnvName(k)+"="+v)
	}
	return env
}

func (h *harness) startProcs(ctx context.Context) error {
	for range h.opts.workers {
		if _, err := h.startWorker(ctx); err != nil {
			return err
		}
	}
	api, err := startProc(h.bin, h.tmp, "api-1", "api", h.env)
	if err != nil {
		return err
	}
	h.procMu.Lock()
	h.api = api
	h.allProcs = append(h.allProcs, api)
	h.procMu.Unlock()
	if h.apiAddr, err = api.waitReady(ctx, 60*time.Second); err != nil {
		return err
	}
	return nil
}

// startWorker starts one worker process and waits until it is ready.
func (h *harness) startWorker(ctx context.Context) (*proc, error) {
	h.procMu.Lock()
	h.nextID++
	name := fmt.Sprintf("worker-%d", h.nextID)
	h.procMu.Unlock()
	p, err := startProc(h.bin, h.tmp, name, "worker", h.env)
	if err != nil {
		return nil, err
	}
	h.procMu.Lock()
	h.workers = append(h.workers, p)
	h.allProcs = append(h.allProcs, p)
	h.procMu.Unlock()
	if _, err := p.waitReady(ctx, 60*time.Second); err != nil {
		return p, err
	}
	return p, nil
}

func (h *harness) procList() string {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	var s []string
	for _, p := range h.allProcs {
		if ok, _ := p.hasExited(); !ok {
			s = append(s, fmt.Sprintf("%s(pid %d)", p.name, p.pid()))
		}
	}
	return strings.Join(s, " ")
}

func (h *harness) liveProcs() []*proc {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	var out []*proc
	for _, p := range h.allProcs {
		if ok, _ := p.hasExited(); !ok {
			out = append(out, p)
		}
	}
	return out
}

func (h *harness) liveWorkers() []*proc {
	h.procMu.Lock()
	defer h.procMu.Unlock()
	var out []*proc
	for _, p := range h.workers {
		if ok, _ := p.hasExited(); !ok {
			out = append(out, p)
		}
	}
	return out
}

// ensureWorkers notes every process that exited without being killed by
// the soak and restarts workers up to --workers, as a supervisor would.
func (h *harness) ensureWorkers(ctx context.Context) {
	h.procMu.Lock()
	var dead []*proc
	for _, p := range h.allProcs {
		if ok, err := p.hasExited(); ok && !h.killed[p] {
			dead = append(dead, p)
			h.killed[p] = true // report once
			_ = err
		}
	}
	h.procMu.Unlock()
	for _, p := range dead {
		_, err := p.hasExited()
		h.problem("%s (pid %d) exited on its own: %v; last log lines:\n%s", p.name, p.pid(), err, indent(p.tailText()))
	}
	for len(h.liveWorkers()) < h.opts.workers && ctx.Err() == nil {
		p, err := h.startWorker(ctx)
		if err != nil {
			h.problem("restart of a worker failed: %v", err)
			return
		}
		h.logf("started %s (pid %d) to keep %d workers", p.name, p.pid(), h.opts.workers)
	}
}

func (h *harness) stopAll() {
	for _, p := range h.liveProcs() {
		_ = p.stop(15 * time.Second)
	}
}

func indent(s string) string { return "      " + strings.ReplaceAll(s, "\n", "\n      ") }

// produce appends events until ctx ends. One transaction in ten is rolled
// back on purpose: half by the function returning an error before the
// append, half by a deferred constraint failing at COMMIT after it. A
// quarter of the others go through the api process's POST
// /v1/spaces/{space}/events. Every event whose append succeeded is recorded
// with the seq its producer was told.
func (h *harness) produce(ctx context.Context, n int) {
	interval := time.Duration(float64(time.Second) * float64(h.opts.producers) / h.opts.rate)
	next := time.Now()
	for i := 0; ; i++ {
		next = next.Add(interval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		tx := h.newProducerTx(n, i)
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		evs, err := h.appendTx(wctx, tx)
		cancel()
		err = checkAppended(tx.ids, evs, err)
		h.recordTx(tx, evs, err)
		var refused *refusedError
		if errors.As(err, &refused) {
			h.problem("producer %d: the api refused a valid append: %v", n, err)
		}
		if err != nil && tx.roll > 1 {
			select { // the database is away: do not spin
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			next = time.Now()
		}
	}
}

// errDeliberate is the error a producer's transaction returns to roll back
// before its append.
var errDeliberate = errors.New("deliberate rollback")

// producerTx is one transaction of a producer: its events, and how it is
// sent. roll 0 rolls back before the append, roll 1 at commit; viaHTTP
// sends it through the api process.
type producerTx struct {
	space   string
	news    []sync.NewEvent
	ids     []uuid.UUID
	roll    int
	viaHTTP bool
}

// newProducerTx draws transaction i of producer n: one to three events in
// a random space, and whether it rolls back or goes through the api.
func (h *harness) newProducerTx(n, i int) *producerTx {
	count := 1 + h.randN(3)
	space := spaceA
	if h.randN(2) == 1 {
		space = spaceB
	}
	tx := &producerTx{space: space, news: make([]sync.NewEvent, count), ids: make([]uuid.UUID, count)}
	for j := range tx.news {
		tx.ids[j] = uuid.Must(uuid.NewV7())
		tx.news[j] = sync.NewEvent{ID: tx.ids[j], Space: space, Type: "item.updated", Actor: actor,
			Data: []byte(fmt.Sprintf(`{"producer":%d,"tx":%d,"n":%d}`, n, i, j))}
	}
	tx.roll = h.randN(20) // 0: before the append, 1: at commit
	tx.viaHTTP = tx.roll > 1 && h.randN(4) == 0
	return tx
}

// appendTx sends tx through the api process or the producer API.
func (h *harness) appendTx(ctx context.Context, ptx *producerTx) ([]sync.Event, error) {
	if ptx.viaHTTP {
		return h.appendHTTP(ctx, ptx.space, ptx.news)
	}
	return h.log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		switch ptx.roll {
		case 0:
			return nil, errDeliberate
		case 1:
			if _, err := tx.Exec(ctx, `INSERT INTO soak_doomed VALUES (-1)`); err != nil {
				return nil, err
			}
		}
		return ptx.news, nil
	})
}

// checkAppended turns an answer that does not list the events ids in order
// into an error; it returns err unchanged otherwise.
func checkAppended(ids []uuid.UUID, evs []sync.Event, err error) error {
	if err == nil && len(evs) != len(ids) {
		err = fmt.Errorf("append of %d events answered %d", len(ids), len(evs))
	}
	for k := range evs {
		if err == nil && evs[k].ID != ids[k] {
			err = fmt.Errorf("append answered event %s for %s", evs[k].ID, ids[k])
		}
	}
	return err
}

// recordTx records tx's outcome: its events acknowledged, rolled back on
// purpose, or in doubt after a fault.
func (h *harness) recordTx(tx *producerTx, evs []sync.Event, err error) {
	var pgErr *pgconn.PgError
	h.prodMu.Lock()
	defer h.prodMu.Unlock()
	switch {
	case err == nil:
		for _, e := range evs {
			h.acked[e.ID] = e.Seq
		}
		if tx.viaHTTP {
			h.ackedHTTP += len(evs)
		}
	case errors.Is(err, errDeliberate):
		h.rbBefore++
		for _, id := range tx.ids {
			h.rolledBack[id] = true
		}
	case tx.roll == 1 && errors.As(err, &pgErr) && pgErr.Code == "23503":
		h.rbAtCommit++
		for _, id := range tx.ids {
			h.rolledBack[id] = true
		}
	default:
		// A fault hit the write: it may or may not have committed.
		h.errsOther++
		for _, id := range tx.ids {
			h.doubt[id] = true
		}
	}
}

// refusedError is a 4xx answer to an append: the soak's request was wrong,
// which is a problem of the run, not a fault.
type refusedError struct {
	status int
	body   string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("POST events: %d %s", e.status, strings.TrimSpace(e.body))
}

// appendHTTP appends news in one request to the api process, with the
// events' own ids, and returns the events as its 201 answer lists them. Any
// other answer is an error: a refusedError for a 4xx, which means nothing
// was committed.
func (h *harness) appendHTTP(ctx context.Context, space string, news []sync.NewEvent) ([]sync.Event, error) {
	type newEventJSON struct {
		ID   uuid.UUID       `json:"id"`
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	req := struct {
		Events []newEventJSON `json:"events"`
	}{}
	for _, e := range news {
		req.Events = append(req.Events, newEventJSON{ID: e.ID, Type: e.Type, Data: e.Data})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.apiAddr+"/v1/spaces/"+space+"/events", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Authorization", "Bearer "+h.token)
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := h.httpc.Do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusCreated:
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, &refusedError{status: resp.StatusCode, body: string(b)}
	default:
		return nil, fmt.Errorf("POST events: %d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var out struct {
		Events []sync.Envelope `json:"events"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("POST events: 201 with %w", err)
	}
	evs := make([]sync.Event, len(out.Events))
	for i, e := range out.Events {
		evs[i] = sync.Event{Seq: e.Seq, ID: e.ID, Space: e.Space, Type: e.Type, Actor: e.Actor, Data: e.Data}
	}
	return evs, nil
}

// query runs fn with a bounded context, retrying while the database is
// away (a restart), for at most total.
func (h *harness) query(ctx context.Context, total time.Duration, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(total)
	for {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := fn(qctx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
