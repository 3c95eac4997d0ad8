package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// Channel is the LISTEN/NOTIFY channel that wakes readers of the log. Its
// notifications carry no payload: they only say "look again".
const Channel = "event_log"

// appendLockKey is the pg_advisory_xact_lock key producers may queue on
// before touching the counter row (EventLogConfig.AdvisoryLock). It helped
// while the lock window held a WAL flush; with the flush moved out of the
// window it only adds lock traffic, and measured slower (ADR 0009).
const appendLockKey int64 = 0x626f7468795f6c67 // "bothy_lg"

// NotifyMode says where the producer sends NOTIFY event_log.
type NotifyMode int

const (
	// NotifyAfterCommit (the default) sends NOTIFY from a separate statement
	// after the producer's commit, coalescing concurrent producers into one
	// notification in flight. A lost notification (crash right after commit)
	// is covered by the consumers' poll.
	NotifyAfterCommit NotifyMode = iota
	// NotifyInTx sends NOTIFY inside the producer's transaction. Kept for the
	// benchmark that justified the default: PostgreSQL's notify queue lock
	// is held through the commit's WAL flush, serializing commits twice.
	NotifyInTx
	// NotifyNone sends nothing (benchmarks, tests of the poll path).
	NotifyNone
)

// EventLogConfig configures an EventLog.
type EventLogConfig struct {
	// Notify chooses how readers are woken. Default NotifyAfterCommit.
	Notify NotifyMode
	// AdvisoryLock queues producers on a transaction-scoped advisory lock
	// (FIFO) in front of the counter row (benchmark only). Default false.
	AdvisoryLock bool
	// FlushInLock makes the producer's COMMIT wait for its WAL flush while it
	// still holds the counter (benchmark only). By default the COMMIT is
	// asynchronous and the flush is forced right after, outside the lock;
	// see Write.
	FlushInLock bool
	// Now is the clock for defaults of NewEvent. Default time.Now.
	Now func() time.Time
}

// EventLog is the producer side and the reader side of event_log.
type EventLog struct {
	pool     *pgxpool.Pool
	cfg      EventLogConfig
	notifier *notifier
}

var _ sync.Producer = (*EventLog)(nil)
var _ sync.EventSource = (*EventLog)(nil)
var _ sync.DurabilityBarrier = (*EventLog)(nil)

// NewEventLog returns an EventLog on pool. Call Close to wait for the last
// notification to be sent.
func NewEventLog(pool *pgxpool.Pool, cfg *EventLogConfig) *EventLog {
	c := EventLogConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &EventLog{pool: pool, cfg: c, notifier: newNotifier(pool)}
}

// Close waits for a notification in flight.
func (l *EventLog) Close() { l.notifier.wait() }

const appendSQL = `
WITH c AS (
    UPDATE event_seq SET last_seq = last_seq + $1 WHERE id
    RETURNING last_seq, clock_timestamp() AS ts
)
INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at, data)
SELECT c.last_seq - $1 + e.ord, c.ts, e.id, e.space, e.type, e.actor, e.occurred_at, e.data
FROM c, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[])
    WITH ORDINALITY AS e(id, space, type, actor, occurred_at, data, ord)
RETURNING seq, committed_at`

// flushSQL makes the WAL durable up to this point. PostgreSQL flushes the
// WAL at commit only for a transaction that has an xid and wrote WAL
// itself; one that merely takes an xid (pg_current_xact_id) commits
// asynchronously whatever synchronous_commit says. A transactional logical
// message has both, so its commit waits until the WAL is on disk past its
// own commit record, which lies after the producer's. It needs no
// privilege and no wal_level beyond the default. Concurrent producers' flushes share fsyncs (group
// commit), which a flush inside the counter's lock window cannot: there each
// holder of the counter waits for its own.
const flushSQL = `SELECT pg_logical_emit_message(true, 'bothy_flush', '')`

// Write implements sync.Producer. The counter update with the event insert
// and COMMIT go to the server as one pipeline, so the serialized phase (from
// the counter's row lock to its release at commit) contains no client round
// trip.
//
// The COMMIT inside the lock window is asynchronous (synchronous_commit off
// for this transaction only): the counter is released as soon as the commit
// is visible, without waiting for the disk. The same pipeline then runs a
// flush transaction (flushSQL) outside the window, so a caller that got nil
// holds a durable commit; TestCrashLosesNoAcknowledgedEvent crashes
// PostgreSQL to check it. Other sessions may see the events a moment before they are
// durable: whatever shows them outside the database makes the WAL durable
// first (see Durable). If the server crashes in between, the lost commits
// are the newest ones, in seq order, so the log stays gapless.
func (l *EventLog) Write(ctx context.Context, fn sync.WriteFunc) ([]sync.Event, error) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("append: acquire: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("append: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	news, err := fn(ctx, tx)
	if err != nil {
		return nil, err
	}
	if len(news) == 0 {
		if err := tx.Commit(ctx); err != nil {
			return nil, fmt.Errorf("append: commit: %w", err)
		}
		committed = true
		return nil, nil
	}
	now := l.cfg.Now()
	n := len(news)
	ids := make([]uuid.UUID, n)
	spaces, types, actors := make([]string, n), make([]string, n), make([]string, n)
	occurred := make([]time.Time, n)
	datas := make([]json.RawMessage, n)
	news = slices.Clone(news) // Normalize fills defaults; leave the caller's slice alone
	for i := range news {
		e := &news[i]
		if err := e.Normalize(now); err != nil {
			return nil, fmt.Errorf("append event %d: %w", i, err)
		}
		ids[i], spaces[i], types[i], actors[i], occurred[i], datas[i] = e.ID, e.Space, e.Type, e.Actor, e.OccurredAt, e.Data
	}

	b := &pgx.Batch{}
	if !l.cfg.FlushInLock {
		b.Queue(`SET LOCAL synchronous_commit = off`)
	}
	if l.cfg.AdvisoryLock {
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, appendLockKey)
	}
	out := make([]sync.Event, 0, n)
	b.Queue(appendSQL, n, ids, spaces, types, actors, occurred, datas).Query(func(rows pgx.Rows) error {
		i := 0
		for rows.Next() {
			var seq int64
			var at time.Time
			if err := rows.Scan(&seq, &at); err != nil {
				return err
			}
			e := news[i]
			out = append(out, sync.Event{Seq: seq, CommittedAt: at, ID: e.ID, Space: e.Space, Type: e.Type,
				Actor: e.Actor, OccurredAt: e.OccurredAt, Data: e.Data})
			i++
		}
		return rows.Err()
	})
	if l.cfg.Notify == NotifyInTx {
		b.Queue(`SELECT pg_notify($1, '')`, Channel)
	}
	var tag string
	b.Queue(`COMMIT`).Exec(func(ct pgconn.CommandTag) error { tag = ct.String(); return nil })
	if !l.cfg.FlushInLock {
		b.Queue(flushSQL)
	}
	err = conn.SendBatch(ctx, b).Close()
	if tag == "COMMIT" {
		committed = true
	}
	if err != nil {
		if committed {
			// The commit is visible but its flush was not confirmed, as when a
			// connection drops during a plain COMMIT: the outcome is unknown.
			return nil, fmt.Errorf("append %d events: committed, durability unconfirmed: %w", n, err)
		}
		return nil, fmt.Errorf("append %d events: %w", n, mapAppendErr(err))
	}
	if tag != "COMMIT" {
		// The transaction had failed before (an error fn swallowed); the
		// server answered COMMIT with ROLLBACK.
		return nil, fmt.Errorf("append %d events: %w", n, pgx.ErrTxCommitRollback)
	}
	if l.cfg.Notify == NotifyAfterCommit {
		l.notifier.signal()
	}
	return out, nil
}

// durableSQL flushes the WAL up to its current end unless that is flushed
// already; the logical message is only written (and its commit only waits
// for the disk) when something is left to flush.
const durableSQL = `
SELECT CASE WHEN pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()
            THEN pg_logical_emit_message(true, 'bothy_flush', '') END`

// Durable implements sync.DurabilityBarrier.
func (l *EventLog) Durable(ctx context.Context) error { return Durable(ctx, l.pool) }

// Durable returns once every commit visible before the call is on disk
// (sync.DurabilityBarrier). It runs as a transaction of its own, so db
// must not be a transaction.
func Durable(ctx context.Context, db *pgxpool.Pool) error {
	if _, err := db.Exec(ctx, durableSQL); err != nil {
		return fmt.Errorf("flush the log: %w", err)
	}
	return nil
}

func mapAppendErr(err error) error {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "23514" {
		return fmt.Errorf("%w (no event_log partition covers now: is the maintenance job running?)", err)
	}
	return err
}

const eventsAfterSQL = `
SELECT seq, committed_at, id, space, type, actor, occurred_at, data
FROM event_log WHERE seq > $1 ORDER BY seq LIMIT $2`

// EventsAfter implements sync.EventSource.
func (l *EventLog) EventsAfter(ctx context.Context, tx pgx.Tx, p *sync.EventsAfterParams) ([]sync.Event, error) {
	rows, err := tx.Query(ctx, eventsAfterSQL, p.AfterSeq, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanEvent)
}

func scanEvent(row pgx.CollectableRow) (sync.Event, error) {
	var e sync.Event
	err := row.Scan(&e.Seq, &e.CommittedAt, &e.ID, &e.Space, &e.Type, &e.Actor, &e.OccurredAt, &e.Data)
	return e, err
}

// LowSeq implements sync.EventSource.
func (l *EventLog) LowSeq(ctx context.Context, tx pgx.Tx) (int64, error) {
	var low int64
	err := tx.QueryRow(ctx, `SELECT low_seq FROM event_log_retention`).Scan(&low)
	return low, err
}

// Head returns the newest seq handed out (0 for an empty log).
func Head(ctx context.Context, db Querier) (int64, error) {
	var head int64
	err := db.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head)
	return head, err
}

// Querier is what both *pgxpool.Pool and pgx.Tx offer.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
