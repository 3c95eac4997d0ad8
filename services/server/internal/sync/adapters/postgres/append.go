package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

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
	out, used, err := l.appendFresh(ctx, span, news, ids)
	if used {
		return l.write(ctx, span, whole)
	}
	return out, err
}

// appendFresh appends news, whose ids are ids, in one pipeline. used
// reports that one of the ids is in event_ids already: nothing was
// appended.
func (l *EventLog) appendFresh(ctx context.Context, span trace.Span, news []sync.NewEvent, ids []uuid.UUID) (out []sync.Event, used bool, err error) {
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("append: acquire: %w", err)
	}
	defer conn.Release()
	all := make([]int, len(news))
	for i := range all {
		all[i] = i
	}
	out, committed, err := l.appendAndCommit(ctx, conn, ids, news, all, sync.FormatTraceParent(span.SpanContext()))
	if err != nil && !committed {
		rollbackOpen(ctx, conn)
		return nil, isUsedID(err), err
	}
	if err != nil {
		return nil, false, err
	}
	l.committed()
	return out, false, nil
}

// sortedIDs returns the ids of news in byte order, and whether one
// appears twice.
func sortedIDs(news []sync.NewEvent) ([]uuid.UUID, bool) {
	ids := make([]uuid.UUID, len(news))
	for i := range news {
		ids[i] = news[i].ID
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	return ids, len(slices.Compact(slices.Clone(ids))) < len(ids)
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
