package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/sleep"
)

// maintenanceLockKey serializes partition maintenance between workers.
const maintenanceLockKey int64 = 0x626f7468795f6d74 // "bothy_mt"

// Backoff between attempts of a step that timed out on a lock: it doubles
// from the first to the cap, with jitter so that two maintainers do not
// retry in step.
const (
	lockRetryFirst = 50 * time.Millisecond
	lockRetryCap   = time.Second
)

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
	// LockTimeout is the lock_timeout of every partition statement. A
	// statement waiting for a lock on event_log makes producers queue behind
	// it, so this is the longest maintenance can hold up an append
	// (TestPartitions_MaintainNeverStallsProducers). Default 20ms.
	LockTimeout time.Duration
	// RetryFor bounds how long one call keeps retrying steps that ran out of
	// LockTimeout before it gives up. Default 30s.
	RetryFor time.Duration
	// Logger receives a debug record for every retry. Default slog.Default().
	Logger *slog.Logger
}

func (c *PartitionConfig) withDefaults() PartitionConfig {
	out := *c
	out.Interval = cmp.Or(out.Interval, 24*time.Hour)
	out.Ahead = cmp.Or(out.Ahead, 3)
	out.LockTimeout = cmp.Or(out.LockTimeout, 20*time.Millisecond)
	out.RetryFor = cmp.Or(out.RetryFor, 30*time.Second)
	out.Logger = cmp.Or(out.Logger, slog.Default())
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
	// LowSeq is the retention mark after the pass; zero if the pass failed.
	LowSeq int64
}

// Maintain makes sure partitions exist from the one containing now to Ahead
// intervals later, then drops those entirely older than now−Retention,
// raising the retention mark to one past the highest seq they held.
//
// Each partition is created or dropped in its own transaction, so a retry
// redoes one step only; a drop and the mark it raises commit together. A
// step that runs out of LockTimeout is rolled back and retried with backoff
// until RetryFor has passed or ctx ends. On error, the result still lists
// the partitions created and dropped before it, and LowSeq is zero.
func (p *Partitions) Maintain(ctx context.Context, now time.Time) (*MaintenanceResult, error) {
	r := p.retrier()
	res := &MaintenanceResult{}
	var err error
	if res.Created, err = p.ensure(ctx, p.pool, r, now); err != nil {
		return res, fmt.Errorf("event_log maintenance: %w", err)
	}
	if p.cfg.Retention > 0 {
		if res.Dropped, err = p.dropBefore(ctx, r, now.Add(-p.cfg.Retention)); err != nil {
			return res, fmt.Errorf("event_log maintenance: %w", err)
		}
	}
	if err := p.pool.QueryRow(ctx, `SELECT low_seq FROM event_log_retention`).Scan(&res.LowSeq); err != nil {
		return res, fmt.Errorf("event_log maintenance: read retention mark: %w", err)
	}
	return res, nil
}

// Ensure creates the partitions from the one containing now to Ahead
// intervals later, one transaction each, and returns the names it created.
// Start-up and migrations call it before the first append; it waits for
// locks as Maintain does.
func (p *Partitions) Ensure(ctx context.Context, now time.Time) ([]string, error) {
	created, err := p.ensure(ctx, p.pool, p.retrier(), now)
	if err != nil {
		return created, fmt.Errorf("event_log partitions: %w", err)
	}
	return created, nil
}

// EnsurePartitions creates the partitions covering now and the next ahead
// intervals inside the caller's transaction, each in a savepoint that is
// retried as Ensure retries its transactions, with the defaults of
// PartitionConfig. The caller's lock_timeout is restored on success.
func EnsurePartitions(ctx context.Context, tx pgx.Tx, now time.Time, interval time.Duration, ahead int) ([]string, error) {
	var prev string
	if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&prev); err != nil {
		return nil, err
	}
	p := NewPartitions(nil, &PartitionConfig{Interval: interval, Ahead: ahead}) // no pool: every step runs in tx
	created, err := p.ensure(ctx, tx, p.retrier(), now)
	if err != nil {
		return nil, err
	}
	// A setting made in a released savepoint outlives it.
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, prev); err != nil {
		return nil, err
	}
	return created, nil
}

// beginner starts a transaction: *pgxpool.Pool a real one, pgx.Tx a
// savepoint.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func (p *Partitions) ensure(ctx context.Context, db beginner, r *lockRetrier, now time.Time) ([]string, error) {
	var created []string
	start := now.UTC().Truncate(p.cfg.Interval)
	for i := 0; i <= p.cfg.Ahead; i++ {
		from := start.Add(time.Duration(i) * p.cfg.Interval)
		name := "event_log_p" + from.Format("20060102t150405")
		var made bool
		err := r.run(ctx, db, "create partition "+name, func(tx pgx.Tx) (err error) {
			made, err = createPartition(ctx, tx, name, from, from.Add(p.cfg.Interval))
			return err
		})
		if err != nil {
			return created, err
		}
		if made {
			created = append(created, name)
		}
	}
	return created, nil
}

// createPartition creates partition name for [from, to) unless a partition
// already covers part of that span (the interval may have been changed
// between runs: overlapping bounds would fail), and reports whether it did.
//
// It creates a plain table and attaches it rather than running CREATE TABLE
// ... PARTITION OF: that takes ACCESS EXCLUSIVE on event_log, which queues
// behind every reader with the producers queued behind it, while ATTACH
// PARTITION takes SHARE UPDATE EXCLUSIVE, which conflicts with neither
// (TestPartitions_EnsureNeverStallsProducers). The table is empty and unseen
// by others until commit, so ATTACH's validation scan reads nothing; no CHECK
// constraint mirroring the bounds is needed to skip it.
func createPartition(ctx context.Context, tx pgx.Tx, name string, from, to time.Time) (bool, error) {
	var overlaps bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_log_partitions WHERE from_time < $2 AND to_time > $1)`,
		from, to).Scan(&overlaps); err != nil || overlaps {
		return false, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := tx.Exec(ctx, `CREATE TABLE `+ident+` (LIKE event_log INCLUDING ALL)`); err != nil {
		return false, err
	}
	attach := fmt.Sprintf(`ALTER TABLE event_log ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`,
		ident, quoteTime(from), quoteTime(to))
	if _, err := tx.Exec(ctx, attach); err != nil {
		return false, err
	}
	_, err := tx.Exec(ctx, `INSERT INTO event_log_partitions (name, from_time, to_time) VALUES ($1, $2, $3)`, name, from, to)
	return err == nil, err
}

func (p *Partitions) dropBefore(ctx context.Context, r *lockRetrier, cutoff time.Time) ([]string, error) {
	rows, err := p.pool.Query(ctx, `SELECT name FROM event_log_partitions WHERE to_time <= $1 ORDER BY from_time`, cutoff)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var dropped []string
	for _, name := range names {
		err := r.run(ctx, p.pool, "forget event ids of "+name, func(tx pgx.Tx) error {
			return forgetEventIDs(ctx, tx, name)
		})
		if err != nil {
			return dropped, err
		}
		var gone bool
		err = r.run(ctx, p.pool, "drop partition "+name, func(tx pgx.Tx) (err error) {
			gone, err = dropPartition(ctx, tx, name)
			return err
		})
		if err != nil {
			return dropped, err
		}
		if gone {
			dropped = append(dropped, name)
		}
	}
	return dropped, nil
}

// forgetEventIDs deletes from event_ids the ids of partition name's events
// (every id claimed before its highest seq was committed), so that
// event_ids stays as long as the log. It runs before the partition is
// dropped, in its own transaction: the scan of event_ids takes no lock that
// producers wait for, and the drop's transaction, which holds event_log's
// ACCESS EXCLUSIVE lock, stays short. Until the drop, a repeated id of
// those events (older than the retention period) may be appended again
// (TestPartitions_MaintainForgetsEventIDs).
func forgetEventIDs(ctx context.Context, tx pgx.Tx, name string) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM event_log_partitions WHERE name = $1)`, name).Scan(&exists); err != nil || !exists {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM event_ids WHERE after_seq < (SELECT max(seq) FROM `+pgx.Identifier{name}.Sanitize()+`)`)
	return err
}

// dropPartition detaches and drops partition name and raises the retention
// mark to one past the highest seq it held, all in tx, so the mark and the
// drop commit together. It reports false if another maintainer dropped the
// partition first.
//
// DETACH PARTITION takes ACCESS EXCLUSIVE on event_log; its lock_timeout
// keeps that from stalling producers behind a reader
// (TestPartitions_MaintainNeverStallsProducers). DETACH ... CONCURRENTLY
// takes a weaker lock but cannot run in a transaction block, so the mark
// could not commit with it: in between, the mark would either claim seqs
// gone that readers still see, or leave gone seqs above it.
func dropPartition(ctx context.Context, tx pgx.Tx, name string) (bool, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM event_log_partitions WHERE name = $1`, name)
	if err != nil || tag.RowsAffected() == 0 {
		return false, err
	}
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := tx.Exec(ctx, `ALTER TABLE event_log DETACH PARTITION `+ident); err != nil {
		return false, err
	}
	// Read once detached: nothing can be added to the partition any more.
	var maxSeq *int64
	if err := tx.QueryRow(ctx, `SELECT max(seq) FROM `+ident).Scan(&maxSeq); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+ident); err != nil {
		return false, err
	}
	if maxSeq != nil {
		if _, err := tx.Exec(ctx, `UPDATE event_log_retention SET low_seq = greatest(low_seq, $1), last_dropped_at = now()`, *maxSeq+1); err != nil {
			return false, err
		}
	}
	return true, nil
}

// lockRetrier runs the steps of one call under lock_timeout and retries a
// step that ran out of it, until its deadline.
type lockRetrier struct {
	lockTimeout string
	deadline    time.Time
	logger      *slog.Logger
}

func (p *Partitions) retrier() *lockRetrier {
	return &lockRetrier{
		lockTimeout: fmt.Sprintf("%dms", max(p.cfg.LockTimeout.Milliseconds(), 1)),
		deadline:    time.Now().Add(p.cfg.RetryFor),
		logger:      p.cfg.Logger,
	}
}

// run runs fn in a transaction of db that holds the maintenance lock and
// has a short lock_timeout. A lock wait that outlasts it fails the statement,
// which withdraws the lock request producers had queued behind; the
// transaction is rolled back and fn runs again after a backoff.
func (r *lockRetrier) run(ctx context.Context, db beginner, step string, fn func(pgx.Tx) error) error {
	backoff := lockRetryFirst
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			// SET LOCAL lock_timeout, as a function so it takes a parameter.
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, r.lockTimeout); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, maintenanceLockKey); err != nil {
				return err
			}
			return fn(tx)
		})
		if !isLockTimeout(err) {
			if err != nil {
				return fmt.Errorf("%s: %w", step, err)
			}
			return nil
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		if time.Now().Add(wait).After(r.deadline) {
			return fmt.Errorf("%s: gave up after %d attempts: %w", step, attempt, err)
		}
		r.logger.DebugContext(ctx, "event_log partition step waits for a lock", slog.String("step", step),
			slog.Int("attempt", attempt), slog.Duration("retry_in", wait))
		if err := sleep.For(ctx, wait); err != nil {
			return fmt.Errorf("%s: %w", step, err)
		}
		backoff = min(2*backoff, lockRetryCap)
	}
}

// isLockTimeout reports whether err is lock_not_available, what a lock wait
// longer than lock_timeout fails with.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

func quoteTime(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05Z07:00") + "'"
}
