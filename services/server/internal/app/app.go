// Package app composes bothy's roles from the configuration: the database
// pool, River, the consumer worker with its LISTEN connection, the event log
// maintenance, the HTTP server with /metrics, /healthz and /readyz, and the
// feature modules (webhooks, push) that plug consumers, job workers and
// routes into them (the contract is package module; Features lists them).
// cmd/bothy is a thin shell around it.
package app

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/bothy/bothy/services/server/internal/accesslog"
	"github.com/bothy/bothy/services/server/internal/buildinfo"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/httpconn"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/telemetry"
)

// Server is a running "bothy server".
type Server struct {
	cfg      *config.Config
	logger   *slog.Logger
	modules  []module.Factory
	registry *prometheus.Registry
	// tracer, if set, replaces the tracing the environment configures.
	tracer trace.TracerProvider
	// poolConfig, if set, adjusts the pool's configuration (ConfigurePool).
	poolConfig func(*pgxpool.Config)
	// roundTrips counts the pool's round trips (its metric).
	roundTrips *dbconn.RoundTrips

	// Addr is the HTTP listener's address once Run has started it.
	addrCh chan net.Addr
}

// NewServer prepares a server; Run starts it.
func NewServer(cfg *config.Config, logger *slog.Logger, modules []module.Factory) *Server {
	reg := prometheus.NewRegistry()
	trips := &dbconn.RoundTrips{}
	trips.Register(reg)
	return &Server{cfg: cfg, logger: logger, modules: modules, registry: reg, roundTrips: trips, addrCh: make(chan net.Addr, 1)}
}

// Addr waits until the server has started (the database answered and
// every part of the role runs) and returns its HTTP listener's address.
// The listener serves /healthz and /readyz before that.
func (s *Server) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case a := <-s.addrCh:
		s.addrCh <- a
		return a, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Registry is the server's metrics registry.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// TraceWith makes the server trace with tp (tests and benchmarks, with an
// in-memory exporter) instead of the tracing the OTEL_* environment
// configures (telemetry.NewTracing). Call it before Run.
func (s *Server) TraceWith(tp trace.TracerProvider) { s.tracer = tp }

// ConfigurePool makes Run call f with the configuration of the server's
// pool before it connects, after every setting of its own: load tests
// install a pgx tracer there that counts the role's database round trips.
// The LISTEN and liveness connections are not from the pool. Call it
// before Run.
func (s *Server) ConfigurePool(f func(*pgxpool.Config)) { s.poolConfig = f }

// RiverConfig is the River configuration every client of this process uses:
// the same short FetchCooldown everywhere, because an inserting client paces
// its insert notifications by its own cooldown.
func RiverConfig(cfg *config.Config, logger *slog.Logger) *river.Config {
	return &river.Config{
		FetchCooldown:     cfg.River.FetchCooldown,
		FetchPollInterval: cfg.River.FetchPollInterval,
		// A job whose process died mid-run is handed to another worker after
		// this, instead of River's default hour; it must stay above the
		// longest legitimate run (JobTimeout, 1 minute by default).
		RescueStuckJobsAfter: cfg.River.RescueStuckJobsAfter,
		Logger:               logger,
	}
}

// Run runs the configured role until ctx is cancelled, then stops every part
// and returns once all goroutines have ended. The HTTP server listens from
// the start: while the database cannot be reached, /healthz answers ok,
// /readyz 503, and the rest waits (untilReachable); configuration the
// database refuses stops Run at once.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() {
		// Being stopped while starting is a clean stop, not a failure.
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	tracing, err := s.startTracing(ctx)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracing.Shutdown(sctx); err != nil {
			s.logger.WarnContext(sctx, "tracing: the last spans were not exported", slog.Any("error", err))
		}
	}()
	ln, err := net.Listen("tcp", s.cfg.Server.ListenAddr)
	if err != nil {
		return fmt.Errorf("server.listen_addr %s: %w", s.cfg.Server.ListenAddr, err)
	}
	r := &run{s: s, tracing: tracing, appended: sync.NewSpaceBroadcast()}
	defer r.close(ctx)
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	g, gctx := errgroup.WithContext(runCtx)
	r.serveHTTP(ctx, gctx, g, ln)
	if err := r.start(ctx, gctx, g); err != nil {
		// End what was started, so no goroutine outlives Run.
		cancelRun()
		if gerr := g.Wait(); gerr != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
			return gerr // the HTTP server failed, which cancelled the start
		}
		return err
	}
	s.addrCh <- ln.Addr()
	s.logger.InfoContext(ctx, "bothy server started", slog.String("role", s.cfg.Server.Role), slog.String("addr", ln.Addr().String()),
		slog.Int("consumers", len(r.consumers)))
	err = g.Wait()
	s.logger.InfoContext(context.WithoutCancel(ctx), "bothy server stopped", slog.String("role", s.cfg.Server.Role))
	return err
}

// start waits for the database (untilReachable), then builds the role's
// parts and starts them in g; the HTTP server serves the modules' routes
// and judges readiness by the database from then on.
func (r *run) start(ctx, gctx context.Context, g *errgroup.Group) error {
	s := r.s
	err := r.untilReachable(gctx, "connect and check the schema", func(ctx context.Context) (err error) {
		r.pool, err = s.openDatabase(ctx)
		return err
	})
	if err != nil {
		return err
	}
	s.registerMetrics(r.pool)
	r.events = postgres.NewEventLog(r.pool, &postgres.EventLogConfig{Tracer: r.tracing.Provider()})
	if err := r.buildModules(); err != nil {
		return err
	}
	if s.worker() {
		if err := r.holdLiveness(gctx); err != nil {
			return err
		}
	}
	if err := r.newRiver(); err != nil {
		return err
	}
	// Routes come before the modules' runners (module.Runner); the HTTP
	// server serves them once the whole role has started.
	full := r.mux()
	for _, m := range r.mods {
		if rm, ok := m.(module.Runner); ok {
			g.Go(func() error { return rm.Run(gctx) })
		}
	}
	if s.api() {
		r.waker = sync.NewSpaceWaker(r.events, r.appended, &sync.SpaceWakerConfig{PollInterval: s.cfg.Consumer.PollInterval,
			Registerer: s.registry, Logger: s.logger})
		g.Go(func() error { return r.waker.Run(gctx) })
	}
	if s.api() && !s.worker() {
		// The worker's LISTEN connection wakes the API too; an api role
		// alone needs its own, while it has long polls or streams.
		listener := postgres.NewListener(r.waker.Wake, &postgres.ListenerConfig{ConnString: s.cfg.Database.URL, Logger: s.logger,
			ApplicationName: fmt.Sprintf("bothy-%s-%d-listen", s.cfg.Server.Role, os.Getpid())})
		g.Go(func() error { return sync.ListenWhileWatched(gctx, r.appended, listenLinger, listener.Run) })
	}
	if s.worker() {
		if err := r.startWorker(ctx, gctx, g); err != nil {
			return err
		}
	}
	r.front.Store(full)
	return nil
}

// listenLinger is how long an api role keeps listening after its last
// long poll or stream ended: a client that polls again at once finds the
// connection in place.
const listenLinger = 10 * time.Second

// close releases what start opened, after every goroutine of the run has
// ended: the liveness session after River stopped, what the modules opened,
// then the event log and the pool.
func (r *run) close(ctx context.Context) {
	if r.alive != nil {
		_ = r.alive.Close(context.WithoutCancel(ctx)) // closing releases the lock either way
	}
	for _, m := range r.mods {
		if c, ok := m.(module.Closer); ok {
			c.Close()
		}
	}
	if r.events != nil {
		r.events.Close()
	}
	if r.pool != nil {
		r.pool.Close()
	}
}

func (s *Server) worker() bool { return s.cfg.Server.Role == "worker" || s.cfg.Server.Role == "all" }
func (s *Server) api() bool    { return s.cfg.Server.Role == "api" || s.cfg.Server.Role == "all" }

// run holds the parts one Run builds, step by step.
type run struct {
	s         *Server
	pool      *pgxpool.Pool
	tracing   *telemetry.Tracing
	events    *postgres.EventLog
	mods      []module.Module
	consumers []sync.Consumer
	alive     *liveness.Holder
	river     *river.Client[pgx.Tx]
	// appended holds the API's long polls and streams by space; in the
	// roles that serve the API, waker wakes those of the spaces that got
	// events after every NOTIFY event_log the process hears.
	appended *sync.SpaceBroadcast
	waker    *sync.SpaceWaker
	// jobs is the modules' job inserter: the River client once built.
	jobs lateInserter
	// front is the mux the HTTP server serves: startingMux until start
	// has built the role, then mux.
	front atomic.Pointer[http.ServeMux]
	// waiting says why the start waits, while it waits for the database.
	waiting atomic.Pointer[string]
}

// lateInserter inserts with the River client, which is built after the
// modules (it needs their workers).
type lateInserter struct{ client *river.Client[pgx.Tx] }

// InsertTx implements module.JobInserter.
func (l *lateInserter) InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	if l.client == nil {
		return nil, errors.New("river: jobs inserted before the server's River client exists")
	}
	return l.client.InsertTx(ctx, tx, args, opts)
}

// buildModules builds every feature from its factory.
func (r *run) buildModules() error {
	deps := &module.Deps{Pool: r.pool, Events: r.events, Source: r.events, Rounds: postgres.CursorStore{},
		ConsumerStatus: r.events, Reader: r.events, Appended: r.appended, Logger: r.s.logger, Registry: r.s.registry,
		Jobs: &r.jobs}
	for _, f := range r.s.modules {
		m, err := f(deps)
		if err != nil {
			return err
		}
		r.mods = append(r.mods, m)
	}
	return nil
}

// holdLiveness takes the process's liveness lock, held under its River
// client ID while it lives: others take over its jobs and webhook claims
// within seconds of its death. The caller releases it after River stopped.
func (r *run) holdLiveness(ctx context.Context) error {
	cfg := r.s.cfg
	alive, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: cfg.Database.URL, Logger: r.s.logger,
		ApplicationName: fmt.Sprintf("bothy-%s-%d-alive", cfg.Server.Role, os.Getpid())})
	if err != nil {
		return err
	}
	if err := r.untilReachable(ctx, "take the liveness lock", alive.Acquire); err != nil {
		return err
	}
	r.alive = alive
	return nil
}

// newRiver builds the process's River client. In the worker role it works
// the partition maintenance and every module's jobs and periodic jobs, and
// exports River's job metrics; in the api role it only inserts.
func (r *run) newRiver() error {
	cfg := r.s.cfg
	rcfg := RiverConfig(cfg, r.s.logger)
	rcfg.Middleware = r.tracing.RiverMiddleware()
	if r.s.worker() {
		rcfg.ID = r.alive.ID()
		workers := river.NewWorkers()
		river.AddWorker(workers, postgres.NewMaintainWorker(postgres.NewPartitions(r.pool, &postgres.PartitionConfig{
			Interval: cfg.Sync.EventPartitionInterval, Retention: cfg.Sync.EventRetention,
		}), r.s.logger))
		queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: cfg.River.MaxWorkers}}
		rcfg.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(cfg.Sync.MaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return postgres.MaintainArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})}
		for _, m := range r.mods {
			for _, q := range m.RegisterWorkers(workers) {
				queues[q.Name] = river.QueueConfig{MaxWorkers: cmp.Or(q.MaxWorkers, cfg.River.MaxWorkers)}
			}
			r.consumers = append(r.consumers, m.Consumers()...)
			if pm, ok := m.(module.Periodic); ok {
				rcfg.PeriodicJobs = append(rcfg.PeriodicJobs, pm.PeriodicJobs()...)
			}
		}
		rcfg.Queues, rcfg.Workers = queues, workers
		rcfg.Middleware = append(rcfg.Middleware, telemetry.NewRiverMetrics(r.s.registry, r.pool, r.events, &telemetry.RiverMetricsConfig{Logger: r.s.logger}))
	}
	rc, err := river.NewClient(riverpgxv5.New(r.pool), rcfg)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	r.river, r.jobs.client = rc, rc
	return nil
}

// mux serves /metrics, /healthz, /readyz and, in the api role, every
// module's routes.
func (r *run) mux() *http.ServeMux {
	mux := r.s.baseMux(func(w http.ResponseWriter, req *http.Request) {
		if _, err := ready(req.Context(), r.pool); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if r.s.api() {
		for _, m := range r.mods {
			m.Routes(mux)
		}
	}
	return mux
}

// startingMux is served while the role is being built: /readyz says what
// the start waits for, and every path but /metrics and /healthz is 503
// (a problem document that names no host or user).
func (r *run) startingMux() *http.ServeMux {
	reason := func() string {
		if w := r.waiting.Load(); w != nil {
			return *w
		}
		return "starting"
	}
	mux := r.s.baseMux(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready: "+reason(), http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "/v1/problems/unavailable", "title": http.StatusText(http.StatusServiceUnavailable),
			"status": http.StatusServiceUnavailable, "detail": "the server is starting; retry in a few seconds", "instance": req.URL.Path})
	})
	return mux
}

// baseMux serves /metrics, /healthz and, with readyz, /readyz.
func (s *Server) baseMux(readyz http.HandlerFunc) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", readyz)
	return mux
}

// handler is the HTTP server's handler: the current front mux behind the
// access log, behind tracing (off unless configured).
func (r *run) handler() http.Handler {
	front := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.front.Load().ServeHTTP(w, req) })
	return r.tracing.HTTPHandler(accesslog.Handler(front, &accesslog.Config{Logger: r.s.logger,
		Quiet: []string{"GET /metrics", "GET /healthz", "GET /readyz"}}))
}

// serveHTTP starts the HTTP server on ln in g, serving startingMux until
// start swaps in the role's mux, and shuts it down (in-flight requests
// given server.shutdown_timeout) when gctx ends.
func (r *run) serveHTTP(ctx, gctx context.Context, g *errgroup.Group, ln net.Listener) {
	r.front.Store(r.startingMux())
	httpSrv := &http.Server{Handler: r.handler(), ReadHeaderTimeout: 10 * time.Second, ConnContext: httpconn.Context}
	g.Go(func() error {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.s.cfg.Server.ShutdownTimeout)
		defer cancel()
		return httpSrv.Shutdown(sctx)
	})
}

// startWorker starts the worker role's parts in g: the consumer worker with
// its LISTEN connection, the liveness lock and its rescuer, and River, which
// is stopped (in-flight jobs given server.shutdown_timeout) when gctx ends.
func (r *run) startWorker(ctx, gctx context.Context, g *errgroup.Group) error {
	cfg, logger := r.s.cfg, r.s.logger
	rounds := postgres.NewRoundRunner(r.pool, r.events, r.river, &sync.RoundConfig{BatchSize: cfg.Consumer.BatchSize, Logger: logger,
		Budget: sync.WorkBudget{Jobs: cfg.Consumer.RoundMaxJobs, Receivers: cfg.Consumer.RoundMaxReceivers}, Tracer: r.tracing.Provider()})
	w, err := sync.NewWorker(rounds, r.consumers, &sync.WorkerConfig{
		PollInterval: cfg.Consumer.PollInterval, Cooldown: cfg.Consumer.RoundCooldown, RoundTimeout: cfg.Consumer.RoundTimeout,
		Logger: logger, Metrics: sync.NewMetrics(r.s.registry),
	})
	if err != nil {
		return err
	}
	check := func(ctx context.Context) error { return checkConsumers(ctx, r.pool, r.consumers) }
	if err := r.untilReachable(gctx, "check the consumers' cursors", check); err != nil {
		return err
	}
	wake := w.Wake
	if r.waker != nil {
		wake = func() { w.Wake(); r.waker.Wake() }
	}
	listener := postgres.NewListener(wake, &postgres.ListenerConfig{ConnString: cfg.Database.URL, Logger: logger,
		ApplicationName: fmt.Sprintf("bothy-%s-%d-listen", cfg.Server.Role, os.Getpid()), Channels: r.notifications()})
	rescuer, err := liveness.NewRescuer(r.pool, r.alive, &liveness.RescuerConfig{Registerer: r.s.registry, Logger: logger})
	if err != nil {
		return err
	}
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return listener.Run(gctx) })
	g.Go(func() error { return r.alive.Run(gctx) })
	g.Go(func() error { return rescuer.Run(gctx) })
	// River's start pings the database, and may be tried again.
	start := func(context.Context) error { return r.river.Start(gctx) }
	if err := r.untilReachable(gctx, "start River", start); err != nil {
		return fmt.Errorf("river start: %w", err)
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout)
		defer cancel()
		if err := r.river.Stop(sctx); err != nil {
			// In-flight jobs did not finish in time: cancel them; River
			// retries them later, and deliveries are idempotent per webhook-id.
			cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer ccancel()
			return r.river.StopAndCancel(cctx)
		}
		return nil
	})
	return nil
}

// notifications collects the channels the modules listen on.
func (r *run) notifications() map[string]func(string) {
	out := map[string]func(string){}
	for _, m := range r.mods {
		if n, ok := m.(module.Notified); ok {
			maps.Copy(out, n.Notifications())
		}
	}
	return out
}

// startTracing returns the tracing TraceWith set, or the one the OTEL_*
// environment configures: off unless it names a collector.
func (s *Server) startTracing(ctx context.Context) (*telemetry.Tracing, error) {
	if s.tracer != nil {
		return telemetry.NewTracingWith(s.tracer), nil
	}
	t, err := telemetry.NewTracing(ctx, &telemetry.TracingConfig{Logger: s.logger, Attributes: []attribute.KeyValue{
		attribute.String("service.version", buildinfo.Read().Version), attribute.String("bothy.role", s.cfg.Server.Role),
	}})
	if err != nil {
		return nil, err
	}
	if t.Enabled() {
		s.logger.InfoContext(ctx, "tracing on: spans are exported over OTLP/HTTP (OTEL_* environment)")
	}
	return t, nil
}
