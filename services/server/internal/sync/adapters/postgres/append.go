package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/bothy/bothy/services/server/internal/coalesce"
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
	c := &appendCall{ctx: ctx, news: news, ids: ids, traceParent: sync.FormatTraceParent(span.SpanContext())}
	out, used, err := l.join(ctx, c)
	if used {
		// This call's ids, or another's in its group, were used: alone it
		// appends, or it answers as Write does.
		if out, used, err = l.appendFresh(ctx, []*appendCall{c}); used {
			return l.write(ctx, span, whole)
		}
	}
	return out, err
}

// appendCall is one Append waiting for, or in, a shared pipeline, and
// what the pipeline made of it.
type appendCall struct {
	ctx         context.Context
	news        []sync.NewEvent
	ids         []uuid.UUID
	traceParent string
	out         []sync.Event
	used        bool
	err         error
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

// newAppends returns what lets the Append calls of a process that come
// together share one pipeline (one claim, counter update, commit and flush
// for all their events), as PostgreSQL's group commit shares an fsync.
func newAppends(l *EventLog) *coalesce.Batcher[*appendCall] {
	return coalesce.New(l.runShared, coalesce.Options[*appendCall]{
		MaxWeight: maxSharedEvents,
		Weight:    func(c *appendCall) int { return len(c.news) },
		Runners:   maxAppendRunners,
		Stall:     appendStall,
	})
}

// join runs c in the next shared pipeline and returns its outcome. A
// caller whose context ends before a pipeline took its call withdraws it
// (nothing appended); one that ends after gets an error saying the outcome
// is unknown, while the pipeline goes on for the others.
func (l *EventLog) join(ctx context.Context, c *appendCall) ([]sync.Event, bool, error) {
	err := l.appends.Do(ctx, c)
	switch {
	case errors.Is(err, coalesce.ErrOutcomeUnknown):
		return nil, false, fmt.Errorf("append %d events: outcome unknown, the commit was sent: %w", len(c.news), ctx.Err())
	case err != nil:
		return nil, false, fmt.Errorf("append %d events: %w", len(c.news), ctx.Err())
	}
	return c.out, c.used, c.err
}

// runShared runs one shared pipeline for the calls of group, in order,
// and gives each call its outcome.
func (l *EventLog) runShared(group []*appendCall) {
	ctx, cancel := groupContext(group)
	out, used, err := l.appendFresh(ctx, group)
	cancel()
	for _, c := range group {
		c.used, c.err = used, err
		if err == nil && !used {
			// Each call's slice ends at its own events: an append by one
			// caller must not write over the next one's.
			k := len(c.news)
			c.out, out = out[:k:k], out[k:]
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
