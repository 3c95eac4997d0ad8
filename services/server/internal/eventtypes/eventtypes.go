// Package eventtypes keeps the catalog of the event types each space has
// seen: how many events of each, and when and at which seq the last one
// was committed. A consumer of the log keeps it, one upsert per round, so
// reading a space's types is one index range however large the log is,
// instead of grouping the space's retained events at every request.
//
// The catalog follows the log by up to a second (Pace), and counts the events its
// consumer has read since it started (at the head of the log, when its
// migration ran); retention does not lower the counts.
package eventtypes

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// ConsumerName is the cursor name of the catalog's consumer (migration
// 0002).
const ConsumerName = "event_types"

// Consumer is the sync.Consumer that keeps the catalog. It enqueues no
// jobs.
type Consumer struct{}

var (
	_ sync.Consumer      = Consumer{}
	_ sync.ConsumerPacer = Consumer{}
)

// Name implements sync.Consumer.
func (Consumer) Name() string { return ConsumerName }

// Pace is the catalog's freshness: a round a second (at most the worker's
// poll interval) whatever the rate of events, one upsert for all of them,
// instead of a round for every notification.
const Pace = time.Second

// Pace implements sync.ConsumerPacer.
func (Consumer) Pace() time.Duration { return Pace }

// upsertSQL adds a round's counts; a type seen before keeps its first seq
// and time. The rows come sorted by key, so the statement's row locks are
// taken in one order.
const upsertSQL = `
INSERT INTO event_types AS t (space, type, count, first_seq, last_seq, first_seen_at, last_seen_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::timestamptz[], $7::timestamptz[])
ON CONFLICT (space, type) DO UPDATE
SET count = t.count + EXCLUDED.count, last_seq = EXCLUDED.last_seq, last_seen_at = EXCLUDED.last_seen_at`

// seen is what one round saw of one (space, type).
type seen struct {
	space, typ          string
	count               int64
	firstSeq, lastSeq   int64
	firstSeen, lastSeen time.Time
}

// Handle implements sync.Consumer: one statement for the batch, which
// commits with the round's cursor, so no event is counted twice.
func (Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	byKey := map[[2]string]*seen{}
	for i := range events {
		e := &events[i]
		k := [2]string{e.Space, e.Type}
		s, ok := byKey[k]
		if !ok {
			s = &seen{space: e.Space, typ: e.Type, firstSeq: e.Seq, firstSeen: e.CommittedAt}
			byKey[k] = s
		}
		s.count++
		s.lastSeq, s.lastSeen = e.Seq, e.CommittedAt
	}
	rows := make([]*seen, 0, len(byKey))
	for _, s := range byKey {
		rows = append(rows, s)
	}
	slices.SortFunc(rows, func(a, b *seen) int { return cmp.Or(cmp.Compare(a.space, b.space), cmp.Compare(a.typ, b.typ)) })
	n := len(rows)
	spaces, types := make([]string, n), make([]string, n)
	counts, firsts, lasts := make([]int64, n), make([]int64, n), make([]int64, n)
	firstAt, lastAt := make([]time.Time, n), make([]time.Time, n)
	for i, s := range rows {
		spaces[i], types[i], counts[i], firsts[i], lasts[i], firstAt[i], lastAt[i] =
			s.space, s.typ, s.count, s.firstSeq, s.lastSeq, s.firstSeen, s.lastSeen
	}
	if _, err := tx.Exec(ctx, upsertSQL, spaces, types, counts, firsts, lasts, firstAt, lastAt); err != nil {
		return nil, fmt.Errorf("event types: count %d types: %w", n, err)
	}
	return nil, nil
}

// Type is one event type of a space as the catalog has it.
type Type struct {
	Type        string
	Count       int64
	FirstSeq    int64
	LastSeq     int64
	FirstSeenAt time.Time
	LastSeenAt  time.Time
}

// Querier is what both *pgxpool.Pool and pgx.Tx offer for List.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ListParams selects a page of a space's types in type order.
type ListParams struct {
	Space string
	// AfterType, if set, lists only types that sort after it.
	AfterType string
	// Limit is the most returned. Required.
	Limit int
}

// List reads a page of a space's types, in type order. What it returns
// may include a round's commit that is not durable yet: a caller that
// shows it calls sync.DurabilityBarrier.Durable first.
func List(ctx context.Context, q Querier, p *ListParams) ([]Type, error) {
	rows, err := q.Query(ctx, `SELECT type, count, first_seq, last_seq, first_seen_at, last_seen_at FROM event_types
WHERE space = $1 AND type > $2 ORDER BY type LIMIT $3`, p.Space, p.AfterType, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list event types of %q: %w", p.Space, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Type, error) {
		var t Type
		err := row.Scan(&t.Type, &t.Count, &t.FirstSeq, &t.LastSeq, &t.FirstSeenAt, &t.LastSeenAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list event types of %q: %w", p.Space, err)
	}
	return out, nil
}

// View is a Type as the API shows it.
type View struct {
	Type        string    `json:"type"`
	Count       int64     `json:"count"`
	FirstSeq    int64     `json:"first_seq"`
	LastSeq     int64     `json:"last_seq"`
	FirstSeenAt time.Time `json:"first_seen_at"`
	LastSeenAt  time.Time `json:"last_seen_at"`
}

// View returns t as the API shows it.
func (t *Type) View() View {
	return View{Type: t.Type, Count: t.Count, FirstSeq: t.FirstSeq, LastSeq: t.LastSeq, FirstSeenAt: t.FirstSeenAt.UTC(),
		LastSeenAt: t.LastSeenAt.UTC()}
}
