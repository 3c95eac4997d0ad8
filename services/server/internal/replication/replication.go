// Package replication reports the replication that bothy's acknowledgments
// rest on when PostgreSQL is highly available: how many synchronous
// standbys confirm each commit. An acknowledged event waits for them
// (docs/adr/0068-high-availability-postgresql.md); with none in sync, a
// failover can take back what was acknowledged, so the roles export the
// count as bothy_database_synchronous_standbys and an alert watches it.
package replication

import (
	"context"
	"log/slog"
	gosync "sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Querier runs a query: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// standbysSQL counts the WAL senders whose standby confirms commits
// (sync, or quorum under synchronous_standby_names = 'ANY n (...)'), and
// those whose state this session may not see: pg_stat_replication shows
// a role without pg_read_all_stats (pg_monitor has it) only the process
// IDs.
const standbysSQL = `
SELECT count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')),
       count(*) FILTER (WHERE sync_state IS NULL)
FROM pg_stat_replication`

// SynchronousStandbys returns how many synchronous standbys the server
// that q reaches has in sync now; known is false when the session may not
// see their state.
func SynchronousStandbys(ctx context.Context, q Querier) (n int, known bool, err error) {
	var hidden int
	if err := q.QueryRow(ctx, standbysSQL).Scan(&n, &hidden); err != nil {
		return 0, false, err
	}
	return n, hidden == 0, nil
}

// Collector exports bothy_database_synchronous_standbys, read at scrape
// time. It exports nothing when the database cannot be read or the role
// may not see the replication state (logged once: grant pg_monitor); the
// alert counts a missing value as none.
type Collector struct {
	q       Querier
	logger  *slog.Logger
	timeout time.Duration
	desc    *prometheus.Desc
	hidden  gosync.Once
}

// NewCollector returns a collector of q's server to register on a
// registry. logger defaults to slog.Default().
func NewCollector(q Querier, logger *slog.Logger) *Collector {
	if logger == nil {
		logger = slog.Default()
	}
	return &Collector{q: q, logger: logger, timeout: 5 * time.Second,
		desc: prometheus.NewDesc("bothy_database_synchronous_standbys",
			"Standbys of the database server that confirm every commit now (pg_stat_replication sync_state sync or quorum).", nil, nil)}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	n, known, err := SynchronousStandbys(ctx, c.q)
	switch {
	case err != nil:
		c.logger.Warn("read the synchronous standbys for metrics", slog.Any("error", err))
	case !known:
		c.hidden.Do(func() {
			c.logger.Warn("the database role may not see pg_stat_replication's sync_state; bothy_database_synchronous_standbys " +
				"is not exported (GRANT pg_monitor TO the role)")
		})
	default:
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
	}
}
