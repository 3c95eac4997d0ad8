package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// The first event after the cursor gives the pending age and, like a
// round, where the consumer goes next: a seq above last_seq+1 (or, when
// no event is left, retention's low mark above it) means retention
// removed the seqs in between before the consumer read them. Each
// partition's (seq, committed_at) index answers the lateral read directly.
// The one-row tables are read as scalar subqueries, not joined: the
// planner, which has no statistics for them until autovacuum analyzes
// them, estimates a cross join of thousands of rows each, and a plan that
// costly is JIT-compiled (PostgreSQL's default jit=on), which made each
// scrape cost over half a second of the server's CPU.
const ConsumerStatusSQL = `
SELECT c.name, c.last_seq, (SELECT last_seq FROM event_seq) AS head, c.last_round_at,
       coalesce(extract(epoch FROM (now() - f.committed_at)), 0)::float8 AS pending_age,
       coalesce(f.seq, (SELECT low_seq FROM event_log_retention)) AS next_seq
FROM event_consumer_cursors c
LEFT JOIN LATERAL (
    SELECT e.seq, e.committed_at FROM event_log e WHERE e.seq > c.last_seq ORDER BY e.seq LIMIT 1
) f ON true
ORDER BY c.name`

// ConsumerStatuses reads every consumer's position, head and pending age.
func ConsumerStatuses(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]sync.ConsumerStatus, error) {
	rows, err := db.Query(ctx, ConsumerStatusSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (sync.ConsumerStatus, error) {
		var s sync.ConsumerStatus
		var pendingAge float64
		var next int64
		err := row.Scan(&s.Name, &s.LastSeq, &s.Head, &s.LastRoundAt, &pendingAge, &next)
		if next > s.LastSeq+1 {
			s.Lost = sync.SeqRange{From: s.LastSeq + 1, To: next - 1}
		}
		s.Lag = max(s.Head-s.LastSeq, 0)
		s.PendingAge = time.Duration(max(pendingAge, 0) * float64(time.Second))
		return s, err
	})
}

// ConsumerStatuses implements sync.ConsumerStatusReader on the log's pool.
func (l *EventLog) ConsumerStatuses(ctx context.Context) ([]sync.ConsumerStatus, error) {
	sts, err := ConsumerStatuses(ctx, l.pool)
	if err != nil {
		return nil, fmt.Errorf("read consumer status: %w", err)
	}
	return sts, nil
}

// LagCollector exports the consumer gauges computed from the database at
// scrape time, so every role reports them: a dead worker cannot
// leave a stale, healthy-looking value behind.
type LagCollector struct {
	pool    *pgxpool.Pool
	logger  *slog.Logger
	timeout time.Duration

	lag, pendingAge, lastRound, head, up *prometheus.Desc
}

// NewLagCollector returns a collector to register on a registry.
func NewLagCollector(pool *pgxpool.Pool, logger *slog.Logger) *LagCollector {
	if logger == nil {
		logger = slog.Default()
	}
	return &LagCollector{
		pool: pool, logger: logger, timeout: 5 * time.Second,
		lag: prometheus.NewDesc("bothy_event_consumer_lag",
			"Events committed but not yet processed by the consumer (head_seq - last_seq).", []string{"consumer"}, nil),
		pendingAge: prometheus.NewDesc("bothy_event_consumer_pending_age_seconds",
			"Age of the oldest event the consumer has not processed; 0 when none.", []string{"consumer"}, nil),
		lastRound: prometheus.NewDesc("bothy_event_consumer_last_success_timestamp_seconds",
			"Unix time of the consumer's last committed round; 0 before the first.", []string{"consumer"}, nil),
		head: prometheus.NewDesc("bothy_event_log_head_seq",
			"The newest seq handed out by the event log.", nil, nil),
		up: prometheus.NewDesc("bothy_event_consumer_status_up",
			"1 if the consumer gauges could be read from the database at this scrape, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *LagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.pendingAge
	ch <- c.lastRound
	ch <- c.head
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *LagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	sts, err := ConsumerStatuses(ctx, c.pool)
	if err == nil {
		// The head and the cursors may come from commits not yet on disk.
		err = Durable(ctx, c.pool)
	}
	if err != nil {
		c.logger.Warn("read consumer status for metrics", slog.Any("error", err))
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for i, s := range sts {
		if i == 0 {
			ch <- prometheus.MustNewConstMetric(c.head, prometheus.GaugeValue, float64(s.Head))
		}
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(s.Lag), s.Name)
		ch <- prometheus.MustNewConstMetric(c.pendingAge, prometheus.GaugeValue, s.PendingAge.Seconds(), s.Name)
		var last float64
		if s.LastRoundAt != nil {
			last = float64(s.LastRoundAt.UnixNano()) / 1e9
		}
		ch <- prometheus.MustNewConstMetric(c.lastRound, prometheus.GaugeValue, last, s.Name)
	}
}
