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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bothy/bothy/services/server/internal/coalesce"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Channel is the LISTEN/NOTIFY channel that wakes readers of the log. Its
// notifications carry no payload: they only say "look again".
const Channel = "event_log"

// appendLockKey is the pg_advisory_xact_lock key of the advisory-lock
// variant that benchmarks compare with (measured slower).
const appendLockKey int64 = 0x626f7468795f6c67 // "bothy_lg"

// NotifyMode says where the producer sends NOTIFY event_log.
type NotifyMode int

const (
	// NotifyAfterCommit (the default) sends NOTIFY from a separate statement
	// after the producer's commit, coalescing concurrent producers into one
	// notification in flight. A lost notification (crash right after commit)
	// is covered by the consumers' poll.
	NotifyAfterCommit NotifyMode = iota
	// NotifyNone sends nothing (benchmarks, tests of the poll path).
	NotifyNone
)

// EventLogConfig configures an EventLog.
type EventLogConfig struct {
	// Notify chooses how readers are woken. Default NotifyAfterCommit.
	Notify NotifyMode
	// Now is the clock for defaults of NewEvent. Default time.Now.
	Now func() time.Time
	// Tracer makes the span of every Write, whose trace context is stored
	// with the events it appends. Default: a no-op provider (no tracing).
	Tracer trace.TracerProvider
}

// EventLog is the producer side and the reader side of event_log.
type EventLog struct {
	pool     *pgxpool.Pool
	cfg      EventLogConfig
	tracer   trace.Tracer
	notifier *notifier
	// appends shares pipelines among concurrent Append calls.
	appends *coalesce.Batcher[*appendCall]
	// variant holds the alternatives benchmarks compare with; the zero
	// value is the production path.
	variant variant
}

// variant switches the producer to designs measured and not kept (ADR
// 0009). Only tests set it (export_test.go).
type variant struct {
	// advisoryLock queues producers on a transaction-scoped advisory lock
	// in front of the counter row.
	advisoryLock bool
	// flushInLock commits synchronously inside the counter window.
	flushInLock bool
	// notifyInTx sends NOTIFY inside the producer's transaction.
	notifyInTx bool
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
	if c.Tracer == nil {
		c.Tracer = noop.NewTracerProvider()
	}
	l := &EventLog{pool: pool, cfg: c, notifier: newNotifier(pool),
		tracer: c.Tracer.Tracer("github.com/bothy/bothy/services/server/internal/sync/adapters/postgres")}
	l.appends = newAppends(l)
	return l
}

// Close waits for the shared Append pipelines still running (their calls
// have returned), then for a notification in flight, which one of them may
// have started.
func (l *EventLog) Close() {
	l.appends.Wait()
	l.notifier.wait()
}

const appendSQL = `
WITH c AS (
    UPDATE event_seq SET last_seq = last_seq + $1 WHERE id
    RETURNING last_seq, clock_timestamp() AS ts
)
INSERT INTO event_log (seq, committed_at, id, space, type, actor, occurred_at, data, traceparent)
SELECT c.last_seq - $1 + e.ord, c.ts, e.id, e.space, e.type, e.actor, e.occurred_at, e.data, e.traceparent
FROM c, unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::jsonb[], $8::text[])
    WITH ORDINALITY AS e(id, space, type, actor, occurred_at, data, traceparent, ord)
RETURNING seq, committed_at`

// flushSQL makes the WAL durable up to this point. PostgreSQL flushes the
// WAL at commit, and waits for the synchronous standbys, only for a
// transaction that has an xid and wrote WAL itself; one that merely takes
// an xid (pg_current_xact_id) commits asynchronously whatever
// synchronous_commit says. A transactional logical message has both, so
// its commit waits until the WAL is on disk, and on the synchronous
// standbys where they are configured (TestSynchronousStandby), past its own
// commit record, which lies after the producer's. It needs no
// privilege and no wal_level beyond the default. Concurrent producers' flushes share fsyncs (group
// commit), which a flush inside the counter's lock window cannot: there each
// holder of the counter waits for its own.
const flushSQL = `SELECT pg_logical_emit_message(true, 'bothy_flush', '')`

// flushNotifySQL is flushSQL carrying the process's notification
// (notifier.take): readers learn of the commit once it is durable, with no
// transaction of the notification's own.
const flushNotifySQL = `SELECT pg_logical_emit_message(true, 'bothy_flush', ''), pg_notify('` + Channel + `', '')`

// claimIDsSQL records the events' ids in event_ids before the counter is
// taken, and returns those that were not there. The unique index makes a
// producer claiming an id that an uncommitted transaction claimed wait for
// it to end, outside the counter's window; the ids come sorted, so two
// producers claiming overlapping sets take them in the same order and cannot
// deadlock. after_seq is the head before this producer takes the counter,
// so the event's seq is larger (see loggedEventsSQL).
const claimIDsSQL = `
INSERT INTO event_ids (id, after_seq)
SELECT id, (SELECT last_seq FROM event_seq) FROM unnest($1::uuid[]) AS id
ON CONFLICT (id) DO NOTHING
RETURNING id`

// loggedEventsSQL finds the logged events of ids that were claimed before:
// the first event with the id after its claim's after_seq, looking at most
// $3 seqs ahead. event_log has no index on id; its primary key leads with
// seq, so each id costs a short range scan per partition. Each claim is
// looked up on its own in event_ids' primary key; joined, a plan made
// while event_ids was small hashes the whole table on every call.
const loggedEventsSQL = `
SELECT e.seq, e.committed_at, e.id, e.space, e.type, e.actor, e.occurred_at, e.data, e.data = d.data
FROM unnest($1::uuid[], $2::jsonb[]) AS d(id, data)
CROSS JOIN LATERAL (SELECT after_seq FROM event_ids i WHERE i.id = d.id LIMIT 1) i
CROSS JOIN LATERAL (
    SELECT * FROM event_log e
    WHERE e.seq > i.after_seq AND e.seq <= i.after_seq + $3 AND e.id = d.id
    ORDER BY e.seq LIMIT 1
) e`

// sameDataSQL returns the positions (from 1) of the pairs whose jsonb
// values differ: what "the same data" means for a repeated event id.
const sameDataSQL = `
SELECT array_agg(n) FROM unnest($1::jsonb[], $2::jsonb[]) WITH ORDINALITY AS t(a, b, n) WHERE a <> b`

// Write implements sync.Producer. The counter update with the event insert
// and COMMIT go to the server as one pipeline, so the serialized phase (from
// the counter's row lock to its release at commit) contains no client round
// trip.
//
// Before that, outside the window, the events' ids are claimed in
// event_ids (claimIDsSQL): an id that is there already, or that a
// concurrent producer holds and then commits, is not appended again; the
// caller gets the logged event with Duplicate set
// (TestEventLog_WriteRepeatedID). A repeated id whose space, type, actor or
// data differ is an *sync.EventError wrapping sync.ErrEventIDConflict, and
// nothing commits.
//
// The COMMIT inside the lock window is asynchronous (synchronous_commit off
// for this transaction only): the counter is released as soon as the commit
// is visible, without waiting for the disk. The same pipeline then runs a
// flush transaction (flushSQL) outside the window, so a caller that got nil
// holds a durable commit: on disk (TestCrashLosesNoAcknowledgedEvent
// crashes PostgreSQL to check it) and on the synchronous standbys
// (TestFailover_PrimaryLostUnderLoad loses the primary). A flush whose
// wait for the standbys was cancelled is not taken as durable
// (dbfault.ErrUnconfirmed). Other sessions may see the events a moment before they are
// durable: whatever shows them outside the database makes the WAL durable
// first (see Durable). If the server crashes in between, the lost commits
// are the newest ones, in seq order, so the log stays gapless.
//
// Write is traced (EventLogConfig.Tracer): its span, a child of the
// caller's, covers fn and the commit, and its trace context is stored with
// the appended events (Event.TraceParent), in the same INSERT.
func (l *EventLog) Write(ctx context.Context, fn sync.WriteFunc) (out []sync.Event, err error) {
	ctx, span := l.tracer.Start(ctx, "bothy.event_log.write", trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { endWriteSpan(span, out, err) }()
	return l.write(ctx, span, fn)
}

// write is Write within span.
func (l *EventLog) write(ctx context.Context, span trace.Span, fn sync.WriteFunc) (out []sync.Event, err error) {
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
	if news, err = normalized(news, l.cfg.Now()); err != nil {
		return nil, err
	}
	p, err := planAppend(ctx, tx, news)
	if err != nil {
		return nil, err
	}
	out = make([]sync.Event, len(news))
	if len(p.fresh) == 0 {
		committed, err = commitLoggedOnly(ctx, conn, tx)
		if err != nil {
			return nil, err
		}
		p.fill(out, nil)
		return out, nil
	}
	appended, committed, err := l.appendAndCommit(ctx, conn, nil, news, p.fresh, sameTraceParent(span, len(news)))
	if err != nil {
		return nil, err
	}
	p.fill(out, appended)
	return out, nil
}

// notifies says whether commits that append wake the readers with NOTIFY
// after them (NotifyAfterCommit).
func (l *EventLog) notifies() bool {
	return l.cfg.Notify == NotifyAfterCommit && !l.variant.notifyInTx
}

// normalized returns a copy of news with defaults filled in, so the
// caller's slice is left alone.
func normalized(news []sync.NewEvent, now time.Time) ([]sync.NewEvent, error) {
	news = slices.Clone(news)
	for i := range news {
		if err := news[i].Normalize(now); err != nil {
			return nil, &sync.EventError{Index: i, Err: err}
		}
	}
	return news, nil
}

// commitLoggedOnly commits a Write whose every event is in the log already:
// no counter, and a commit that is synchronous like any other. What the
// answer shows (the logged events) is made durable first, as a read would.
func commitLoggedOnly(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx) (committed bool, err error) {
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("append: commit: %w", err)
	}
	if err := durable(ctx, conn); err != nil {
		return true, fmt.Errorf("append: committed, %w", err)
	}
	return true, nil
}

// appendAndCommit appends the events of news at the positions fresh and
// commits, in one pipeline: the counter's window holds no client round trip.
// The transaction is open on conn already, unless claim is not nil: then
// the pipeline begins it and claims the ids in claim first (claimAllIDsSQL).
// committed reports whether the server committed, also when err says the
// flush after it was not confirmed.
func (l *EventLog) appendAndCommit(ctx context.Context, conn *pgxpool.Conn, claim []uuid.UUID, news []sync.NewEvent, fresh []int,
	traceParents []string) (appended []sync.Event, committed bool, err error) {
	b := &pgx.Batch{}
	if claim != nil {
		b.Queue(`BEGIN`)
		b.Queue(claimAllIDsSQL, claim)
	}
	if !l.variant.flushInLock {
		b.Queue(`SET LOCAL synchronous_commit = off`)
	}
	if l.variant.advisoryLock {
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, appendLockKey)
	}
	appended = make([]sync.Event, 0, len(fresh))
	queueAppend(b, news, fresh, traceParents, &appended)
	if l.variant.notifyInTx {
		b.Queue(`SELECT pg_notify($1, '')`, Channel)
	}
	var tag string
	b.Queue(`COMMIT`).Exec(func(ct pgconn.CommandTag) error { tag = ct.String(); return nil })
	carried := false
	if !l.variant.flushInLock {
		flush := flushSQL
		if l.notifies() && l.notifier.take() {
			flush, carried = flushNotifySQL, true
		}
		b.Queue(flush)
	}
	_ = standbyWaitCancelled(conn.Conn().PgConn())
	err = conn.SendBatch(ctx, b).Close()
	committed = tag == "COMMIT"
	if err == nil {
		err = standbyWaitCancelled(conn.Conn().PgConn())
	}
	switch {
	case !l.notifies(), carried && committed && err == nil:
		// Nothing to announce, or the flush announced it.
	case committed || carried:
		// The flush carried no notification or may not have sent it, or it
		// took one that an earlier commit was waiting for.
		l.notifier.signal()
	}
	n := len(fresh)
	switch {
	case err != nil && committed:
		// The commit is visible but its flush was not confirmed, as when a
		// connection drops during a plain COMMIT: the outcome is unknown.
		return nil, true, fmt.Errorf("append %d events: committed, durability unconfirmed: %w", n, err)
	case err != nil && commitMaySucceed(err):
		// The pipeline, COMMIT included, may be on the server already,
		// which runs it to its end whether or not the client still reads.
		return nil, false, fmt.Errorf("append %d events: outcome unknown, the commit was sent: %w", n, err)
	case err != nil:
		return nil, false, fmt.Errorf("append %d events: %w", n, mapAppendErr(err))
	case !committed:
		// The transaction had failed before (an error fn swallowed); the
		// server answered COMMIT with ROLLBACK.
		return nil, false, fmt.Errorf("append %d events: %w", n, pgx.ErrTxCommitRollback)
	}
	return appended, true, nil
}

// commitMaySucceed says whether err, which ended a pipeline that holds a
// COMMIT before its answer came, leaves the commit possible: the server
// did not refuse a statement before it (a *pgconn.PgError, after which it
// skips the rest), and the pipeline was sent, at least in part (not an
// error pgconn marks safe to retry, nor one of pgx's before the pipeline).
// A cancelled context is such an error once the pipeline is sent.
func commitMaySucceed(err error) bool {
	var pgErr *pgconn.PgError
	var before pgx.ErrPreprocessingBatch
	return !errors.As(err, &pgErr) && !errors.As(err, &before) && !pgconn.SafeToRetry(err)
}

// queueAppend queues the INSERT of the events of news at the positions
// fresh, in that order, each with its trace context from traceParents (by
// position in news; stored NULL when empty); the rows it returns are added
// to *appended as the events with their seq and commit time.
func queueAppend(b *pgx.Batch, news []sync.NewEvent, fresh []int, traceParents []string, appended *[]sync.Event) {
	n := len(fresh)
	ids := make([]uuid.UUID, n)
	spaces, types, actors := make([]string, n), make([]string, n), make([]string, n)
	occurred := make([]time.Time, n)
	datas := make([]json.RawMessage, n)
	stored := make([]*string, n)
	for j, i := range fresh {
		e := &news[i]
		ids[j], spaces[j], types[j], actors[j], occurred[j], datas[j] = e.ID, e.Space, e.Type, e.Actor, e.OccurredAt, e.Data
		if traceParents[i] != "" {
			stored[j] = &traceParents[i]
		}
	}
	b.Queue(appendSQL, n, ids, spaces, types, actors, occurred, datas, stored).Query(func(rows pgx.Rows) error {
		for j := 0; rows.Next(); j++ {
			var seq int64
			var at time.Time
			if err := rows.Scan(&seq, &at); err != nil {
				return err
			}
			e := news[fresh[j]]
			*appended = append(*appended, sync.Event{Seq: seq, CommittedAt: at, ID: e.ID, Space: e.Space, Type: e.Type,
				Actor: e.Actor, OccurredAt: e.OccurredAt, Data: e.Data, TraceParent: traceParents[fresh[j]]})
		}
		return rows.Err()
	})
}

// appendPlan says what becomes of each event of a Write.
type appendPlan struct {
	// fresh are the positions of the events to append, in call order.
	fresh []int
	// first maps each position to the first event of the call with its id
	// (itself for the first).
	first []int
	// logged holds, by position, the logged event of a first occurrence
	// whose id was in the log already.
	logged map[int]sync.Event
}

// fill writes the call's result into out: appended are the events of
// p.fresh, in order, as the counter numbered them.
func (p *appendPlan) fill(out []sync.Event, appended []sync.Event) {
	for j, i := range p.fresh {
		out[i] = appended[j]
	}
	for i, e := range p.logged {
		out[i] = e
	}
	for i, f := range p.first {
		if f != i {
			out[i] = out[f]
			out[i].Duplicate = true
		}
	}
}

// planAppend collapses repeated ids within news, claims the ids in
// event_ids and finds the logged events of those claimed before. It
// returns an *sync.EventError wrapping sync.ErrEventIDConflict for a
// repeated id whose event differs.
func planAppend(ctx context.Context, tx pgx.Tx, news []sync.NewEvent) (*appendPlan, error) {
	p := &appendPlan{first: make([]int, len(news)), logged: map[int]sync.Event{}}
	firstOf := make(map[uuid.UUID]int, len(news))
	var later []int // repeats within the call
	for i := range news {
		f, seen := firstOf[news[i].ID]
		if !seen {
			f = i
			firstOf[news[i].ID] = i
		} else {
			later = append(later, i)
		}
		p.first[i] = f
	}
	if err := sameWithinCall(ctx, tx, news, p.first, later); err != nil {
		return nil, err
	}

	unique := make([]uuid.UUID, 0, len(firstOf))
	for id := range firstOf {
		unique = append(unique, id)
	}
	sortIDs(unique) // distinct already
	rows, err := tx.Query(ctx, claimIDsSQL, unique)
	if err != nil {
		return nil, fmt.Errorf("append: claim event ids: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("append: claim event ids: %w", err)
	}
	isNew := make(map[uuid.UUID]bool, len(claimed))
	for _, id := range claimed {
		isNew[id] = true
	}
	var repeated []int // first occurrences whose id was claimed before
	for i, f := range p.first {
		switch {
		case f != i:
		case isNew[news[i].ID]:
			p.fresh = append(p.fresh, i)
		default:
			repeated = append(repeated, i)
		}
	}
	if len(repeated) > 0 {
		if err := p.findLogged(ctx, tx, news, repeated); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// sameWithinCall checks that every later event of the call with an earlier
// event's id is that event again.
func sameWithinCall(ctx context.Context, tx pgx.Tx, news []sync.NewEvent, first, later []int) error {
	if len(later) == 0 {
		return nil
	}
	a, b := make([]json.RawMessage, len(later)), make([]json.RawMessage, len(later))
	for k, i := range later {
		e, f := &news[i], &news[first[i]]
		if e.Space != f.Space || e.Type != f.Type || e.Actor != f.Actor {
			return &sync.EventError{Index: i, Err: fmt.Errorf("id %s is also the id of event %d, which differs in space, type or actor: %w", e.ID, first[i], sync.ErrEventIDConflict)}
		}
		a[k], b[k] = e.Data, f.Data
	}
	var differ []int
	if err := tx.QueryRow(ctx, sameDataSQL, a, b).Scan(&differ); err != nil {
		return fmt.Errorf("append: compare repeated events: %w", err)
	}
	if len(differ) > 0 {
		i := later[differ[0]-1]
		return &sync.EventError{Index: i, Err: fmt.Errorf("id %s is also the id of event %d, which differs in data: %w", news[i].ID, first[i], sync.ErrEventIDConflict)}
	}
	return nil
}

// findLogged reads the logged events of the positions in repeated, whose
// ids were claimed by transactions that have committed, and records them in
// p.logged. The search widens until it covers the whole log; an id whose
// event is not found (retention removed it before the id) is a conflict too.
func (p *appendPlan) findLogged(ctx context.Context, tx pgx.Tx, news []sync.NewEvent, repeated []int) error {
	var head int64
	if err := tx.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head); err != nil {
		return fmt.Errorf("append: read head: %w", err)
	}
	left := slices.Clone(repeated)
	for span := int64(1024); len(left) > 0; span *= 8 {
		ids, datas := make([]uuid.UUID, len(left)), make([]json.RawMessage, len(left))
		at := make(map[uuid.UUID]int, len(left))
		for k, i := range left {
			ids[k], datas[k], at[news[i].ID] = news[i].ID, news[i].Data, i
		}
		rows, err := tx.Query(ctx, loggedEventsSQL, ids, datas, span)
		if err != nil {
			return fmt.Errorf("append: read logged events: %w", err)
		}
		for rows.Next() {
			var e sync.Event
			var sameData bool
			if err := rows.Scan(&e.Seq, &e.CommittedAt, &e.ID, &e.Space, &e.Type, &e.Actor, &e.OccurredAt, &e.Data, &sameData); err != nil {
				rows.Close()
				return fmt.Errorf("append: read logged events: %w", err)
			}
			i := at[e.ID]
			ne := &news[i]
			if e.Space != ne.Space || e.Type != ne.Type || e.Actor != ne.Actor || !sameData {
				rows.Close()
				return &sync.EventError{Index: i, Err: fmt.Errorf("id %s already names an event in the log that differs in space, type, actor or data: %w", ne.ID, sync.ErrEventIDConflict)}
			}
			e.Duplicate = true
			p.logged[i] = e
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("append: read logged events: %w", err)
		}
		left = slices.DeleteFunc(left, func(i int) bool { _, ok := p.logged[i]; return ok })
		if len(left) > 0 && span >= head {
			i := left[0]
			return &sync.EventError{Index: i, Err: fmt.Errorf("id %s was used by an event that is no longer in the log: %w", news[i].ID, sync.ErrEventIDConflict)}
		}
	}
	return nil
}

// durableSQL makes every commit visible before it durable: on the disk
// and, where synchronous standbys are configured, on them. It runs a flush
// transaction (whose commit waits for both) unless the WAL is on the local
// disk up to its end and no synchronous standby is configured. A locally
// flushed WAL says nothing of the standbys: the WAL writer flushes
// asynchronous commits (rounds, producers' windows) at once, and a standby
// receives them a moment later; shown in between, they are lost by a
// failover to it (TestSynchronousStandby).
const durableSQL = `
SELECT CASE WHEN pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()
              OR current_setting('synchronous_standby_names') <> ''
            THEN pg_logical_emit_message(true, 'bothy_flush', '') END`

// Durable implements sync.DurabilityBarrier.
func (l *EventLog) Durable(ctx context.Context) error { return Durable(ctx, l.pool) }

// Durable returns once every commit visible before the call is durable:
// on disk, and on the synchronous standbys where they are configured
// (sync.DurabilityBarrier). It runs as a transaction of its own, so db
// must not be a transaction.
func Durable(ctx context.Context, db *pgxpool.Pool) error {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("flush the log: %w", err)
	}
	defer conn.Release()
	return durable(ctx, conn)
}

// durable runs durableSQL on conn, and fails with dbfault.ErrUnconfirmed
// when its wait for the standbys was cancelled.
func durable(ctx context.Context, conn *pgxpool.Conn) error {
	_ = standbyWaitCancelled(conn.Conn().PgConn())
	_, err := conn.Exec(ctx, durableSQL)
	if err == nil {
		err = standbyWaitCancelled(conn.Conn().PgConn())
	}
	if err != nil {
		return fmt.Errorf("flush the log: %w", err)
	}
	return nil
}

// sameTraceParent is span's trace context for each of n events.
func sameTraceParent(span trace.Span, n int) []string {
	tps := make([]string, n)
	tp := sync.FormatTraceParent(span.SpanContext())
	for i := range tps {
		tps[i] = tp
	}
	return tps
}

// endWriteSpan ends a Write's span with what it appended.
func endWriteSpan(span trace.Span, out []sync.Event, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "append failed")
	} else if span.IsRecording() && len(out) > 0 {
		dup := 0
		for i := range out {
			if out[i].Duplicate {
				dup++
			}
		}
		span.SetAttributes(attribute.Int("bothy.events", len(out)), attribute.Int("bothy.events.duplicate", dup),
			attribute.Int64("bothy.event.first_seq", out[0].Seq), attribute.Int64("bothy.event.last_seq", out[len(out)-1].Seq))
	}
	span.End()
}

func mapAppendErr(err error) error {
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "23514" {
		return fmt.Errorf("%w (no event_log partition covers now: is the maintenance job running?)", err)
	}
	return err
}

const eventsAfterSQL = `
SELECT seq, committed_at, id, space, type, actor, occurred_at, data, coalesce(traceparent, '')
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
	err := row.Scan(&e.Seq, &e.CommittedAt, &e.ID, &e.Space, &e.Type, &e.Actor, &e.OccurredAt, &e.Data, &e.TraceParent)
	return e, err
}

// eventsAtSQL looks each seq up on its own (the seqs $1 are distinct), so
// that every plan of it probes the log's primary key. With "seq =
// ANY($1)" the plan a connection caches for the prepared statement is
// chosen for the log's size when it was made: made while the current
// partition was small, it scanned the whole partition on every call for
// as long as the connection lived, however large the partition grew.
const eventsAtSQL = `
SELECT e.seq, e.committed_at, e.id, e.space, e.type, e.actor, e.occurred_at, e.data, coalesce(e.traceparent, '')
FROM unnest($1::bigint[]) AS s(seq)
CROSS JOIN LATERAL (SELECT * FROM event_log l WHERE l.seq = s.seq LIMIT 1) e
ORDER BY e.seq`

// EventsAt implements sync.EventSource.
func (l *EventLog) EventsAt(ctx context.Context, tx pgx.Tx, seqs []int64) ([]sync.Event, error) {
	rows, err := tx.Query(ctx, eventsAtSQL, distinctSeqs(seqs))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanEvent)
}

// QueueEventsAt implements sync.EventSource.
func (l *EventLog) QueueEventsAt(b *pgx.Batch, seqs []int64, into *[]sync.Event) {
	b.Queue(eventsAtSQL, distinctSeqs(seqs)).Query(func(rows pgx.Rows) (err error) {
		*into, err = pgx.CollectRows(rows, scanEvent)
		return err
	})
}

// distinctSeqs returns seqs sorted, each once: several deliveries may be
// of one event.
func distinctSeqs(seqs []int64) []int64 {
	out := slices.Clone(seqs)
	slices.Sort(out)
	return slices.Compact(out)
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
