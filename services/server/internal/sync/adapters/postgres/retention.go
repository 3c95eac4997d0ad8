package postgres

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// maintenanceLockKey serializes partition maintenance between workers.
const maintenanceLockKey int64 = 0x626f7468795f6d74 // "bothy_mt"

// PartitionConfig says how event_log is cut into partitions.
type PartitionConfig struct {
	// Interval is the time span of one partition (sync.event_partition_interval).
	// Default 24h.
	Interval time.Duration
	// Ahead is how many future partitions to keep ready. Default 3.
	Ahead int
	// Retention: partitions whose whole span is older than this are detached
	// and dropped (sync.event_retention). Zero keeps everything.
	Retention time.Duration
}

func (c *PartitionConfig) withDefaults() PartitionConfig {
	out := *c
	out.Interval = cmp.Or(out.Interval, 24*time.Hour)
	out.Ahead = cmp.Or(out.Ahead, 3)
	return out
}

// Partitions creates and drops event_log partitions.
type Partitions struct {
	pool *pgxpool.Pool
	cfg  PartitionConfig
}

// NewPartitions returns the maintenance of event_log's partitions.
func NewPartitions(pool *pgxpool.Pool, cfg *PartitionConfig) *Partitions {
	return &Partitions{pool: pool, cfg: cfg.withDefaults()}
}

// MaintenanceResult reports what one maintenance pass did.
type MaintenanceResult struct {
	Created []string
	Dropped []string
	// LowSeq is the retention mark after the pass.
	LowSeq int64
}

// Maintain makes sure partitions exist from the one containing now to Ahead
// intervals later, then drops those entirely older than now−Retention,
// raising the retention mark to one past the highest seq they held. It runs
// in one transaction, so the mark and the drop commit together.
func (p *Partitions) Maintain(ctx context.Context, now time.Time) (*MaintenanceResult, error) {
	res := &MaintenanceResult{}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, maintenanceLockKey); err != nil {
			return err
		}
		created, err := ensurePartitions(ctx, tx, now, p.cfg.Interval, p.cfg.Ahead)
		if err != nil {
			return err
		}
		res.Created = created
		if p.cfg.Retention > 0 {
			if res.Dropped, err = dropBefore(ctx, tx, now.Add(-p.cfg.Retention)); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT low_seq FROM event_log_retention`).Scan(&res.LowSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("event_log maintenance: %w", err)
	}
	return res, nil
}

// EnsurePartitions creates the partitions covering now and the next ahead
// intervals; migrations and tests call it before the first append.
func EnsurePartitions(ctx context.Context, tx pgx.Tx, now time.Time, interval time.Duration, ahead int) ([]string, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, maintenanceLockKey); err != nil {
		return nil, err
	}
	return ensurePartitions(ctx, tx, now, interval, ahead)
}

func ensurePartitions(ctx context.Context, tx pgx.Tx, now time.Time, interval time.Duration, ahead int) ([]string, error) {
	var created []string
	start := now.UTC().Truncate(interval)
	for i := 0; i <= ahead; i++ {
		from := start.Add(time.Duration(i) * interval)
		to := from.Add(interval)
		// Skip a span another partition already covers in part (the interval
		// may have been changed between runs): overlapping bounds would fail.
		var overlaps bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_log_partitions WHERE from_time < $2 AND to_time > $1)`,
			from, to).Scan(&overlaps); err != nil {
			return nil, err
		}
		if overlaps {
			continue
		}
		name := "event_log_p" + from.Format("20060102t150405")
		ddl := fmt.Sprintf(`CREATE TABLE %s PARTITION OF event_log FOR VALUES FROM (%s) TO (%s)`,
			pgx.Identifier{name}.Sanitize(), quoteTime(from), quoteTime(to))
		if _, err := tx.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO event_log_partitions (name, from_time, to_time) VALUES ($1, $2, $3)`, name, from, to); err != nil {
			return nil, err
		}
		created = append(created, name)
	}
	return created, nil
}

func dropBefore(ctx context.Context, tx pgx.Tx, cutoff time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT name FROM event_log_partitions WHERE to_time <= $1 ORDER BY from_time`, cutoff)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		ident := pgx.Identifier{name}.Sanitize()
		var maxSeq *int64
		if err := tx.QueryRow(ctx, `SELECT max(seq) FROM `+ident).Scan(&maxSeq); err != nil {
			return nil, fmt.Errorf("read partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE event_log DETACH PARTITION `+ident); err != nil {
			return nil, fmt.Errorf("detach partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+ident); err != nil {
			return nil, fmt.Errorf("drop partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM event_log_partitions WHERE name = $1`, name); err != nil {
			return nil, err
		}
		if maxSeq != nil {
			if _, err := tx.Exec(ctx, `UPDATE event_log_retention SET low_seq = greatest(low_seq, $1), last_dropped_at = now()`, *maxSeq+1); err != nil {
				return nil, err
			}
		}
	}
	return names, nil
}

func quoteTime(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05Z07:00") + "'"
}
