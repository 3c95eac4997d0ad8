package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// claimAllIDsSQL claims every id of an Append in event_ids, or fails: an
// id that is there already makes it fail with a unique violation of
// eventIDsKey. Like claimIDsSQL, it waits for a concurrent producer
// that claimed one of the ids, outside the counter's window (the ids come
// sorted), and records the log's head as after_seq.
const claimAllIDsSQL = `
INSERT INTO event_ids (id, after_seq)
SELECT id, (SELECT last_seq FROM event_seq) FROM unnest($1::uuid[]) AS id`

// eventIDsKey is the primary key of event_ids.
const eventIDsKey = "event_ids_pkey"

// Append implements sync.Producer. The usual case, events whose ids the
// log has not seen, is one pipeline: begin, claim the ids, take the
// counter and insert the events, commit, flush. It costs one round trip
// where Write costs three (begin, the claim that decides what to append,
// the append). When an id was used before, or the call repeats one, that
// pipeline rolls back having appended nothing and Append does what Write
// does: the logged events come back with Duplicate set, or a conflict
// (TestEventLog_AppendRepeatedID).
//
// Calls of a process that come together share that pipeline (appends):
// under load one transaction and one flush serve several of them. A shared
// pipeline runs under none of its callers' cancellations and the latest of
// their deadlines, at most 30 s: a call without a deadline fails after
// that (outcome unknown, or committed with its durability unconfirmed,
// when a synchronous standby does not answer). If any id of a shared
// pipeline was used, or two of its calls share an id, nothing is appended
// and each call runs alone as above.
//
// The server has the COMMIT from the start and runs the pipeline to its
// end even if the caller's context ends meanwhile (while the claim or the
// counter waits): such an error leaves the outcome unknown, and a repeat
// with the same ids answers from the log.
func (l *EventLog) Append(ctx context.Context, news []sync.NewEvent) (out []sync.Event, err error) {
	ctx, span := l.tracer.Start(ctx, "bothy.event_log.write", trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { endWriteSpan(span, out, err) }()
	if len(news) == 0 {
		return nil, nil
	}
	if news, err = normalized(news, l.cfg.Now()); err != nil {
		return nil, err
	}
	// Write's path gets the normalized events: the ids Normalize made for
	// events without one are the ids this call claims.
	whole := func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil }
	ids, repeats := sortedIDs(news)
	if repeats {
		return l.write(ctx, span, whole)
	}
	c := &appendCall{ctx: ctx, news: news, ids: ids, traceParent: sync.FormatTraceParent(span.SpanContext()),
		done: make(chan struct{})}
	out, used, err := l.appends.join(ctx, l, c)
	if used {
		// This call's ids, or another's in its group, were used: alone it
		// appends, or it answers as Write does.
		if out, used, err = l.appendFresh(ctx, []*appendCall{c}); used {
			return l.write(ctx, span, whole)
		}
	}
	return out, err
}

// appendCall is one Append waiting for, or in, a shared pipeline.
type appendCall struct {
	ctx         context.Context
	news        []sync.NewEvent
	ids         []uuid.UUID
	traceParent string
	done        chan struct{}
	// taken: a pipeline holds the call; it can no longer withdraw.
	taken bool
	out   []sync.Event
	used  bool
	err   error
}

// appends lets the Append calls of a process that come together share one
// pipeline (one claim, counter update, commit and flush for all their
// events), as PostgreSQL's group commit shares an fsync: while one
// pipeline runs, the calls that arrive wait for the next, which takes them
// all.
type appends struct {
	mu      gosync.Mutex
	running int
	// runners counts the running pipelines' goroutines, for Close.
	runners gosync.WaitGroup
	// latest is when the newest running pipeline started.
	latest time.Time
	queue  []*appendCall
}

// A process runs one shared pipeline at a time, so that calls share it;
// when the newest has run longer than appendStall (it waits for a claim
// another transaction holds, or for a standby), the calls that queue start
// another, up to maxAppendRunners, so that such a pipeline holds up only
// the calls it took.
const (
	maxAppendRunners = 4
	appendStall      = 20 * time.Millisecond
)

// maxSharedEvents bounds the events one shared pipeline appends.
const maxSharedEvents = 1000

// join runs c in the next shared pipeline and returns its outcome. A
// caller whose context ends before a pipeline took its call withdraws it
// (nothing appended); one that ends after gets an error saying the outcome
// is unknown, while the pipeline goes on for the others.
func (a *appends) join(ctx context.Context, l *EventLog, c *appendCall) ([]sync.Event, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("append %d events: %w", len(c.news), err)
	}
	a.mu.Lock()
	a.queue = append(a.queue, c)
	a.startIfStalled(l)
	a.mu.Unlock()
	stalled := time.NewTicker(appendStall)
	defer stalled.Stop()
wait:
	for {
		select {
		case <-c.done:
			return c.out, c.used, c.err
		case <-ctx.Done():
			break wait
		case <-stalled.C:
			a.mu.Lock()
			if !c.taken {
				a.startIfStalled(l)
			}
			a.mu.Unlock()
		}
	}
	select {
	case <-c.done:
		return c.out, c.used, c.err
	default:
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.used, c.err
	default:
	}
	if !c.taken {
		a.queue = slices.DeleteFunc(a.queue, func(q *appendCall) bool { return q == c })
		return nil, false, fmt.Errorf("append %d events: %w", len(c.news), ctx.Err())
	}
	return nil, false, fmt.Errorf("append %d events: outcome unknown, the commit was sent: %w", len(c.news), ctx.Err())
}

// startIfStalled starts a runner when none runs, or when the newest has
// run longer than appendStall and fewer than maxAppendRunners run. a.mu is
// held.
func (a *appends) startIfStalled(l *EventLog) {
	if a.running == 0 || (a.running < maxAppendRunners && time.Since(a.latest) > appendStall) {
		a.running++
		a.latest = time.Now()
		a.runners.Add(1)
		go a.run(l)
	}
}

// run runs the queued calls' pipelines one after the other until none
// waits.
func (a *appends) run(l *EventLog) {
	defer a.runners.Done()
	for {
		a.mu.Lock()
		n, events := 0, 0
		for n < len(a.queue) && (n == 0 || events+len(a.queue[n].news) <= maxSharedEvents) {
			events += len(a.queue[n].news)
			a.queue[n].taken = true
			n++
		}
		group := slices.Clone(a.queue[:n])
		// The taken calls leave the queue's array too, so it keeps no
		// finished call (its events and context) alive.
		clear(a.queue[:n])
		a.queue = a.queue[n:]
		if n == 0 {
			a.running--
			a.mu.Unlock()
			return
		}
		a.latest = time.Now()
		a.mu.Unlock()
		ctx, cancel := groupContext(group)
		out, used, err := l.appendFresh(ctx, group)
		cancel()
		for _, c := range group {
			c.used, c.err = used, err
			if err == nil && !used {
				// Each call's slice ends at its own events: an append by
				// one caller must not write over the next one's.
				k := len(c.news)
				c.out, out = out[:k:k], out[k:]
			}
			close(c.done)
		}
	}
}

// groupContext is the context a shared pipeline runs under: none of its
// callers' cancellations, and the latest of their deadlines, at most
// maxSharedWait from now.
func groupContext(group []*appendCall) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(maxSharedWait)
	var latest time.Time
	for _, c := range group {
		d, ok := c.ctx.Deadline()
		if !ok || !d.Before(limit) {
			latest = limit
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(group[0].ctx), latest)
}

// maxSharedWait bounds a shared pipeline whose callers set no deadline (or
// a later one): calls that come meanwhile wait for it.
const maxSharedWait = 30 * time.Second

// appendFresh appends the events of calls in one pipeline, in call order,
// with each call's trace context. used reports that an id of one of them
// is in event_ids already, or that two calls share an id: nothing was
// appended.
func (l *EventLog) appendFresh(ctx context.Context, calls []*appendCall) (out []sync.Event, used bool, err error) {
	var news []sync.NewEvent
	var ids []uuid.UUID
	var tps []string
	for _, c := range calls {
		news, ids = append(news, c.news...), append(ids, c.ids...)
		for range c.news {
			tps = append(tps, c.traceParent)
		}
	}
	if len(calls) > 1 && sortIDs(ids) {
		return nil, true, nil
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("append: acquire: %w", err)
	}
	defer conn.Release()
	all := make([]int, len(news))
	for i := range all {
		all[i] = i
	}
	out, committed, err := l.appendAndCommit(ctx, conn, ids, news, all, tps)
	if err != nil && !committed {
		rollbackOpen(ctx, conn)
		return nil, isUsedID(err), err
	}
	if err != nil {
		return nil, false, err
	}
	return out, false, nil
}

// sortedIDs returns the ids of news in byte order, and whether one
// appears twice.
func sortedIDs(news []sync.NewEvent) ([]uuid.UUID, bool) {
	ids := make([]uuid.UUID, len(news))
	for i := range news {
		ids[i] = news[i].ID
	}
	return ids, sortIDs(ids)
}

// sortIDs sorts ids in byte order, the order claims take them in, and
// says whether one appears twice.
func sortIDs(ids []uuid.UUID) (repeats bool) {
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return true
		}
	}
	return false
}

// isUsedID says whether err is claimAllIDsSQL's unique violation.
func isUsedID(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == eventIDsKey
}

// rollbackOpen ends the transaction a failed pipeline left open on conn,
// so the connection goes back to the pool usable.
func rollbackOpen(ctx context.Context, conn *pgxpool.Conn) {
	if conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `ROLLBACK`)
	}
}
