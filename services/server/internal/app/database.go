package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/config"
	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbmigrate"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// poolPingTimeout bounds the ping of an idle pool connection before use,
// unless the URL sets pool_ping_timeout.
const poolPingTimeout = 2 * time.Second

// OpenPool connects to the configured database. Every connection waits at
// most dbconn.ConnectTimeout for each host, and an idle connection that does
// not answer a ping within poolPingTimeout is replaced, so a pool on a
// failover formation's URL passes over a lost primary that stopped
// answering (TestOpenPool_PassesOverAHostThatStoppedAnswering).
func OpenPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	return openPool(ctx, cfg, nil)
}

// openPool is OpenPool with configure, if not nil, applied to the pool's
// configuration last (Server.ConfigurePool).
func openPool(ctx context.Context, cfg *config.Config, configure func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.Database.URL)
	if err != nil {
		return nil, fmt.Errorf("database.url: %w", err)
	}
	pc.MaxConns = int32(cfg.Database.MaxConns)
	dbconn.ApplyDefaults(&pc.ConnConfig.Config)
	dbconn.RegisterTypes(pc)
	if pc.PingTimeout == 0 {
		// A connection idle for a second is pinged before it is handed out;
		// one to a server that stopped answering would otherwise hold the
		// caller until its own deadline, if it has one, instead of being
		// replaced by a connection to the new primary.
		pc.PingTimeout = poolPingTimeout
	}
	if _, set := pc.ConnConfig.RuntimeParams["application_name"]; !set {
		// Operators (and the soak's fault injector) tell processes apart in
		// pg_stat_activity by it.
		pc.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("bothy-%s-%d", cfg.Server.Role, os.Getpid())
	}
	postgres.RequireSynchronousCommit(pc)
	dropReadOnly(pc)
	if configure != nil {
		configure(pc)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if errors.Is(err, postgres.ErrAsyncCommitRequested) {
			return nil, fmt.Errorf("database.url: %w", err)
		}
		return nil, fmt.Errorf("connect to PostgreSQL at %s (database.url): %w", net.JoinHostPort(pc.ConnConfig.Host, fmt.Sprint(pc.ConnConfig.Port)), err)
	}
	return pool, nil
}

// dropReadOnly makes the pool close, rather than hand out again, a
// connection whose server has become read-only: a primary being demoted
// (its writes fail with SQLSTATE 25006, answered 503), or a standby. A new
// connection then finds the read-write node (target_session_attrs), where
// the old one would fail every write until its server restarts.
// PostgreSQL 14 and later report both settings to the client as they
// change (TestOpenPool_DropsConnectionsToAServerTurnedReadOnly); older
// servers report neither, and nothing is dropped.
func dropReadOnly(pc *pgxpool.Config) {
	next := pc.AfterRelease
	pc.AfterRelease = func(c *pgx.Conn) bool {
		p := c.PgConn()
		if p.ParameterStatus("in_hot_standby") == "on" || p.ParameterStatus("default_transaction_read_only") == "on" {
			return false
		}
		return next == nil || next(c)
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
	pool, err := openPool(ctx, s.cfg, func(pc *pgxpool.Config) {
		s.roundTrips.Install(pc)
		if s.poolConfig != nil {
			s.poolConfig(pc) // a load test's own tracer replaces the counter
		}
	})
	if err != nil {
		return nil, err
	}
	// Code that expects tables a pending migration would create fails in
	// confusing ways, and code on a schema whose applied migrations differ
	// from the binary's files has no known schema at all: refuse to start.
	st, err := ready(ctx, pool)
	if err != nil {
		pool.Close()
		if errors.Is(err, errPending) {
			return nil, fmt.Errorf("%w (or start with --migrate)", err)
		}
		return nil, err
	}
	if len(st.Newer) > 0 {
		// A rolled-back binary: it runs on the schema a newer release
		// expanded, which every release must allow.
		s.logger.WarnContext(ctx, "the database has migrations newer than this binary",
			slog.String("newest", st.Newer[len(st.Newer)-1].File()), slog.Int("count", len(st.Newer)))
	}
	if err := ensurePartitions(ctx, pool, s.cfg); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
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

// errPending is returned by ready while migrations are pending.
var errPending = errors.New("migrations pending")

// ready checks that the database's migrations are the binary's: none
// pending, none edited (dbmigrate.Status.Check, which names the files).
func ready(ctx context.Context, pool *pgxpool.Pool) (*dbmigrate.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := dbmigrate.GetStatus(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := st.Check(); err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if !st.Current() {
		return nil, fmt.Errorf("%w: bothy %d, River at %d of %d (run bothy migrate up)", errPending, len(st.Pending), st.RiverCurrent, st.RiverLatest)
	}
	return st, nil
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
