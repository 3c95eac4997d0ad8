// Package app composes bothy's roles from the configuration: the database
// pool, River, the consumer worker with its LISTEN connection, the event log
// maintenance, the HTTP server with /metrics, /healthz and /readyz, and the
// feature modules (webhooks, push) that plug consumers, job workers and
// routes into them (the contract is package module; Features lists them).
// cmd/bothy is a thin shell around it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"github.com/bothy/bothy/services/server/internal/buildinfo"
	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// Server is a running "bothy server".
type Server struct {
	cfg      *config.Config
	logger   *slog.Logger
	modules  []module.Factory
	registry *prometheus.Registry

	// Addr is the HTTP listener's address once Run has started it.
	addrCh chan net.Addr
}

// NewServer prepares a server; Run starts it.
func NewServer(cfg *config.Config, logger *slog.Logger, modules []module.Factory) *Server {
	return &Server{cfg: cfg, logger: logger, modules: modules, registry: prometheus.NewRegistry(), addrCh: make(chan net.Addr, 1)}
}

// Addr waits for the HTTP listener and returns its address.
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

// OpenPool connects to the configured database.
func OpenPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pc.MaxConns = int32(cfg.Database.MaxConns)
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		// Operators (and the soak's fault injector) tell processes apart in
		// pg_stat_activity by it.
		pc.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("bothy-%s-%d", cfg.Server.Role, os.Getpid())
	}
	if err := postgres.RequireSynchronousCommit(pc); err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s (database.url): %w", net.JoinHostPort(pc.ConnConfig.Host, fmt.Sprint(pc.ConnConfig.Port)), err)
	}
	return pool, nil
}

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

// openDatabase migrates if asked, connects, and checks that the schema is
// current and event_log has partitions for now.
func (s *Server) openDatabase(ctx context.Context) (*pgxpool.Pool, error) {
	if s.cfg.Server.Migrate {
		if err := Migrate(ctx, s.cfg, s.logger); err != nil {
			return nil, err
		}
	}
	pool, err := OpenPool(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	// Code that expects tables a pending migration would create fails in
	// confusing ways; refuse to start instead.
	if err := ready(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w (or start with --migrate)", err)
	}
	if err := ensurePartitions(ctx, pool, s.cfg); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// registerMetrics registers the process's collectors: Go and process
// metrics, the consumer gauges read from the database, the configuration
// that alert rules compare with, the role and the build.
func (s *Server) registerMetrics(pool *pgxpool.Pool) {
	cfg, role := s.cfg, s.cfg.Server.Role
	s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registry.MustRegister(postgres.NewLagCollector(pool, s.logger))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_pending_alert_after_seconds",
		Help: "The configured consumer.pending_alert_after; BothyEventConsumerLag compares pending age with it.",
	}, func() float64 { return cfg.Consumer.PendingAlertAfter.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_retention_seconds",
		Help: "The configured sync.event_retention.",
	}, func() float64 { return cfg.Sync.EventRetention.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_poll_interval_seconds",
		Help: "The configured consumer.poll_interval: an idle consumer still makes a round this often.",
	}, func() float64 { return cfg.Consumer.PollInterval.Seconds() }))
	s.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "bothy_event_consumer_round_timeout_seconds",
		Help: "The configured consumer.round_timeout: the longest a round may take before it is rolled back.",
	}, func() float64 { return cfg.Consumer.RoundTimeout.Seconds() }))
	roleInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bothy_server_role", Help: "Role this process runs (always 1)."}, []string{"role"})
	roleInfo.WithLabelValues(role).Set(1)
	s.registry.MustRegister(roleInfo)
	s.registry.MustRegister(buildinfo.NewCollector(buildinfo.Read()))
}

// Run runs the configured role until ctx is cancelled, then stops every part
// and returns once all goroutines have ended.
func (s *Server) Run(ctx context.Context) (err error) {
	defer func() {
		// Being stopped while starting is a clean stop, not a failure.
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	cfg := s.cfg
	role := cfg.Server.Role
	worker := role == "worker" || role == "all"
	api := role == "api" || role == "all"

	pool, err := s.openDatabase(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	s.registerMetrics(pool)

	eventLog := postgres.NewEventLog(pool, nil)
	defer eventLog.Close()

	workers := river.NewWorkers()
	rcfg := RiverConfig(cfg, s.logger)
	deps := &module.Deps{Pool: pool, Events: eventLog, Source: eventLog, Rounds: postgres.CursorStore{}, Logger: s.logger, Registry: s.registry}

	var mods []module.Module
	for _, f := range s.modules {
		m, err := f(deps)
		if err != nil {
			return err
		}
		mods = append(mods, m)
	}
	queues := map[string]river.QueueConfig{}
	var consumers []sync.Consumer
	var alive *liveness.Holder
	if worker {
		// The process's liveness lock, held under its River client ID while
		// it lives: others take over its jobs and webhook claims within
		// seconds of its death. Released after River has stopped.
		alive, err = liveness.NewHolder(&liveness.HolderConfig{ConnString: cfg.Database.URL, Logger: s.logger,
			ApplicationName: fmt.Sprintf("bothy-%s-%d-alive", role, os.Getpid())})
		if err != nil {
			return err
		}
		if err := alive.Acquire(ctx); err != nil {
			return err
		}
		defer alive.Close(context.WithoutCancel(ctx)) //nolint:errcheck // closing releases the lock either way
		rcfg.ID = alive.ID()
		river.AddWorker(workers, postgres.NewMaintainWorker(postgres.NewPartitions(pool, &postgres.PartitionConfig{
			Interval: cfg.Sync.EventPartitionInterval, Retention: cfg.Sync.EventRetention,
		}), s.logger))
		queues[river.QueueDefault] = river.QueueConfig{MaxWorkers: cfg.River.MaxWorkers}
		for _, m := range mods {
			for _, q := range m.RegisterWorkers(workers) {
				queues[q] = river.QueueConfig{MaxWorkers: cfg.River.MaxWorkers}
			}
			consumers = append(consumers, m.Consumers()...)
		}
		rcfg.Queues = queues
		rcfg.Workers = workers
		rcfg.PeriodicJobs = []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(cfg.Sync.MaintenanceInterval),
			func() (river.JobArgs, *river.InsertOpts) { return postgres.MaintainArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true})}
		for _, m := range mods {
			if pm, ok := m.(module.Periodic); ok {
				rcfg.PeriodicJobs = append(rcfg.PeriodicJobs, pm.PeriodicJobs()...)
			}
		}
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ready(r.Context(), pool); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	if api {
		for _, m := range mods {
			m.Routes(mux, rc)
		}
	}
	ln, err := net.Listen("tcp", cfg.Server.ListenAddr)
	if err != nil {
		return fmt.Errorf("server.listen_addr %s: %w", cfg.Server.ListenAddr, err)
	}
	s.addrCh <- ln.Addr()
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	g, gctx := errgroup.WithContext(runCtx)
	// stop ends what was started when a later start-up step fails, so no
	// goroutine outlives Run.
	stop := func(err error) error {
		cancelRun()
		_ = g.Wait()
		return err
	}
	g.Go(func() error {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout)
		defer cancel()
		return httpSrv.Shutdown(sctx)
	})
	for _, m := range mods {
		if rm, ok := m.(module.Runner); ok {
			g.Go(func() error { return rm.Run(gctx) })
		}
	}
	if worker {
		metrics := sync.NewMetrics(s.registry)
		rounds := sync.NewRoundRunner(postgres.RoundTx{Pool: pool}, postgres.CursorStore{}, eventLog, postgres.NewJobSink(rc, &postgres.JobSinkConfig{Fast: true}),
			&sync.RoundConfig{BatchSize: cfg.Consumer.BatchSize, Logger: s.logger})
		w, err := sync.NewWorker(rounds, consumers, &sync.WorkerConfig{
			PollInterval: cfg.Consumer.PollInterval, RoundTimeout: cfg.Consumer.RoundTimeout, Logger: s.logger, Metrics: metrics,
		})
		if err != nil {
			return stop(err)
		}
		if err := checkConsumers(ctx, pool, consumers); err != nil {
			return stop(err)
		}
		listener := postgres.NewListener(w.Wake, &postgres.ListenerConfig{ConnString: cfg.Database.URL, Logger: s.logger,
			ApplicationName: fmt.Sprintf("bothy-%s-%d-listen", role, os.Getpid())})
		rescuer, err := liveness.NewRescuer(pool, alive, &liveness.RescuerConfig{Registerer: s.registry, Logger: s.logger})
		if err != nil {
			return stop(err)
		}
		g.Go(func() error { return w.Run(gctx) })
		g.Go(func() error { return listener.Run(gctx) })
		g.Go(func() error { return alive.Run(gctx) })
		g.Go(func() error { return rescuer.Run(gctx) })
		if err := rc.Start(gctx); err != nil {
			return stop(fmt.Errorf("river start: %w", err))
		}
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Server.ShutdownTimeout)
			defer cancel()
			if err := rc.Stop(sctx); err != nil {
				// In-flight jobs did not finish in time: cancel them; River
				// retries them later, and deliveries are idempotent per webhook-id.
				cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer ccancel()
				return rc.StopAndCancel(cctx)
			}
			return nil
		})
	}
	s.logger.InfoContext(ctx, "bothy server started", slog.String("role", role), slog.String("addr", ln.Addr().String()),
		slog.Int("consumers", len(consumers)))
	err = g.Wait()
	s.logger.InfoContext(context.WithoutCancel(ctx), "bothy server stopped", slog.String("role", role))
	return err
}

// checkConsumers refuses to start a worker whose consumers lack a cursor
// row: the migration adding them has not run.
func checkConsumers(ctx context.Context, pool *pgxpool.Pool, consumers []sync.Consumer) error {
	names, err := postgres.CursorNames(ctx, pool)
	if err != nil {
		return fmt.Errorf("read consumer cursors: %w", err)
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	for _, c := range consumers {
		if !have[c.Name()] {
			return fmt.Errorf("consumer %q: %w", c.Name(), sync.ErrUnknownConsumer)
		}
	}
	return nil
}

func ready(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := dbmigrate.GetStatus(ctx, pool)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if !st.Current() {
		return fmt.Errorf("%d migrations pending (run bothy migrate up)", len(st.Pending))
	}
	return nil
}

// ensurePartitions creates the partitions for now and the next three
// intervals, each in its own short transaction that gives way to other
// sessions' locks on event_log, so a restart never stalls the producers of
// processes still running (TestPartitions_EnsureNeverStallsProducers).
func ensurePartitions(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config) error {
	parts := postgres.NewPartitions(pool, &postgres.PartitionConfig{Interval: cfg.Sync.EventPartitionInterval, Ahead: 3})
	if _, err := parts.Ensure(ctx, time.Now()); err != nil {
		return fmt.Errorf("event_log partitions (did migrations run? bothy migrate up): %w", err)
	}
	return nil
}
