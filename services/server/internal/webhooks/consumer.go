package webhooks

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
)

// ConsumerName is the cursor name of the webhooks consumer (inserted by the baseline migration).
const ConsumerName = "webhooks"

// Consumer is the webhooks consumer: in each round it records a delivery
// for every (active matching subscription, event) pair and makes sure each
// subscription that got any has a sender: a live sender is woken through
// WakeChannel, and a job is enqueued only for a subscription no live sender
// holds (wakeOrStart). That job becomes the subscription's one sender. It
// is also a sync.ConsumerLossHandler: a range lost to retention disables
// the subscriptions that could have missed events in it.
type Consumer struct {
	settle time.Duration
	local  LocalSenders
	exprs  *eventexpr.Cache
	errs   *ExpressionErrors
	logger *slog.Logger
}

var (
	_ sync.Consumer            = (*Consumer)(nil)
	_ sync.ConsumerLossHandler = (*Consumer)(nil)
)

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// LivenessSettle is how old the round's session must be before it may
	// judge a sender's process dead (as DeliverConfig.LivenessSettle).
	// Default liveness.Settle.
	LivenessSettle time.Duration
	// Local, if set, are the senders of the process the rounds run in:
	// those are woken directly once a round committed. Default nil: every
	// live sender is woken by a notification.
	Local LocalSenders
	// ExpressionErrors counts filters that failed on an event. Default
	// nil: not counted.
	ExpressionErrors *ExpressionErrors
	// Logger logs filters that failed on an event. Default slog.Default().
	Logger *slog.Logger
}

// NewConsumer returns the webhooks consumer; cfg may be nil.
func NewConsumer(cfg *ConsumerConfig) *Consumer {
	c := &Consumer{settle: liveness.Settle, exprs: eventexpr.NewCache(), logger: slog.Default()}
	if cfg != nil && cfg.LivenessSettle > 0 {
		c.settle = cfg.LivenessSettle
	}
	if cfg != nil {
		c.local, c.errs = cfg.Local, cfg.ExpressionErrors
		c.logger = cmp.Or(cfg.Logger, c.logger)
	}
	return c
}

// Name implements sync.Consumer.
func (*Consumer) Name() string { return ConsumerName }

// matchSQL is the round's matching, shared with Recover and
// EnableFromBacklog: the hit CTE holds every (subscription, seq, event id)
// whose filter matches an event. Each event arrives as its candidate
// filter patterns ($1-$4, see matchArgs), and each candidate is looked up
// by (space, pattern) in webhook_subscription_filters, so
// it reads only the filters that match: its cost follows the matches, not
// how many filters the subscriptions on a space have
// (BenchmarkRoundFilters, TestConsumer_TenantIsolation). DISTINCT merges a
// subscription that matches one event through several patterns.
const matchSQL = `
cand AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[]) AS c(seq, id, space, pattern)
), hit AS (
    SELECT DISTINCT f.subscription_id, c.seq, c.id
    FROM cand c JOIN webhook_subscription_filters f ON f.space = c.space AND f.pattern = c.pattern
)`

// handleSQL matches the whole batch against the active subscriptions in one
// statement (matchSQL). The unique key (subscription_id, event_seq) makes a
// replayed batch insert nothing. In the same snapshot it marks every
// disabled subscription not yet marked with the batch's lowest seq ($5):
// the events its backlog starts with (backlog_from_seq). An operational event
// ($6, with the subscription it is about in $7) is not delivered to the
// subscription it is about. It returns, per subscription, the lowest new
// seq with a NULL filter; and, for each hit of a subscription with a
// filter, which it does not insert, the hit's seq with the filter's text:
// those are evaluated in Go and inserted by insertHeldSQL.
const handleSQL = `
WITH ` + matchSQL + `, ins AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
    SELECT s.id, hit.seq, hit.id
    FROM hit JOIN webhook_subscriptions s ON s.id = hit.subscription_id
    WHERE ` + liveHitSQL + ` AND s.filter IS NULL
    ON CONFLICT (subscription_id, event_seq) DO NOTHING
    RETURNING subscription_id, event_seq
), held AS (
    SELECT s.id, hit.seq, s.filter
    FROM hit JOIN webhook_subscriptions s ON s.id = hit.subscription_id
    WHERE ` + liveHitSQL + ` AND s.filter IS NOT NULL
), mark AS (
    UPDATE webhook_subscriptions SET backlog_from_seq = $5
    WHERE status = 'disabled' AND backlog_from_seq IS NULL AND NOT probing
)
SELECT subscription_id, min(event_seq), NULL FROM ins GROUP BY subscription_id
UNION ALL
SELECT id, seq, filter FROM held
ORDER BY 1, 2`

// liveHitSQL says whether a hit of subscription s is delivered: s is
// active (or probing: its backlog keeps growing), the event comes after
// where s resumes, and it is not an operational event ($6, about $7) about
// s itself.
const liveHitSQL = `(s.status = 'active' OR s.probing) AND hit.seq > s.resume_after_seq
      AND NOT EXISTS (SELECT 1 FROM unnest($6::uuid[], $7::uuid[]) AS o(event_id, about) WHERE o.event_id = hit.id AND o.about = s.id)`

// insertHeldSQL inserts the deliveries of the held hits whose filter was
// true and returns, per subscription, the lowest new seq.
const insertHeldSQL = `
WITH ins AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::uuid[])
    ON CONFLICT (subscription_id, event_seq) DO NOTHING
    RETURNING subscription_id, event_seq
)
SELECT subscription_id, min(event_seq) FROM ins GROUP BY subscription_id`

// Handle implements sync.Consumer.
func (c *Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	seqs, ids, spaces, patterns := matchArgs(events)
	opIDs, about := aboutSubscriptions(events)
	rows, err := tx.Query(ctx, handleSQL, seqs, ids, spaces, patterns, events[0].Seq, opIDs, about)
	if err != nil {
		return nil, fmt.Errorf("webhooks: record deliveries: %w", err)
	}
	from := map[uuid.UUID]int64{}
	var held []heldHit
	var id uuid.UUID
	var seq int64
	var filter *string
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq, &filter}, func() error {
		if filter == nil {
			from[id] = seq
		} else {
			held = append(held, heldHit{sub: id, seq: seq, filter: *filter})
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("webhooks: record deliveries: %w", err)
	}
	if len(held) > 0 {
		if err := c.insertPassed(ctx, tx, events, held, from); err != nil {
			return nil, err
		}
	}
	start, err := wakeOrStart(ctx, tx, from, c.settle.Milliseconds(), c.local)
	if err != nil {
		return nil, err
	}
	jobs := make([]sync.Job, len(start))
	for i := range start {
		jobs[i] = sync.Job{Args: start[i]}
	}
	return jobs, nil
}

// aboutSubscriptions returns the operational events among events and the
// subscription each is about.
func aboutSubscriptions(events []sync.Event) (ids, about []uuid.UUID) {
	ids, about = []uuid.UUID{}, []uuid.UUID{}
	for i := range events {
		if !IsOperational(events[i].Type) {
			continue
		}
		var d NoticeData
		if json.Unmarshal(events[i].Data, &d) == nil && d.SubscriptionID != uuid.Nil {
			ids, about = append(ids, events[i].ID), append(about, d.SubscriptionID)
		}
	}
	return ids, about
}

// matchArgs returns matchSQL's arguments for events: one row per event and
// candidate pattern of its type.
func matchArgs(events []sync.Event) (seqs []int64, ids []uuid.UUID, spaces, patterns []string) {
	for i := range events {
		e := &events[i]
		for _, p := range candidates(e.Type) {
			seqs, ids, spaces, patterns = append(seqs, e.Seq), append(ids, e.ID), append(spaces, e.Space), append(patterns, p)
		}
	}
	return seqs, ids, spaces, patterns
}

// candidates returns every filter pattern that matches an event of type
// typ: the type itself, "p.*" for each prefix p of it that ends before a
// dot, and "*". For a.b.c: a.b.c, a.b.*, a.* and *. These are exactly the
// filters the grammar of CreateParams.EventTypes lets match typ, so looking
// them up finds every matching filter without reading the others.
func candidates(typ string) []string {
	out := make([]string, 0, 2+strings.Count(typ, "."))
	out = append(out, typ)
	for i := len(typ) - 1; i >= 0; i-- {
		if typ[i] == '.' {
			if p := typ[:i+1] + "*"; p != typ {
				out = append(out, p)
			}
		}
	}
	if typ != "*" {
		out = append(out, "*")
	}
	return out
}

// HandleLost implements sync.ConsumerLossHandler. The events of the lost
// range cannot be read any more, so their spaces are unknown: every active
// (or probing) subscription that existed before the range ended could have
// missed one, and is disabled with cause gap.
func (*Consumer) HandleLost(ctx context.Context, tx pgx.Tx, consumer string, lost sync.SeqRange) error {
	detail := fmt.Sprintf("events %s were removed by retention before the webhooks consumer read them", lost)
	rows, err := tx.Query(ctx, `
UPDATE webhook_subscriptions
SET status = 'disabled', disabled_cause = 'gap', disabled_detail = $2, disabled_at = now(), updated_at = now(),
    `+lease.ClearSQL+`
WHERE (status = 'active' OR probing) AND resume_after_seq < $1
RETURNING id, space`, lost.To, detail)
	if err != nil {
		return fmt.Errorf("webhooks: disable subscriptions after lost %s: %w", lost, err)
	}
	// Each disabled subscription's space learns of it (bothy.webhook.gap),
	// through notice jobs that commit with the round.
	notices, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (NoticeArgs, error) {
		var id uuid.UUID
		var space string
		if err := row.Scan(&id, &space); err != nil {
			return NoticeArgs{}, err
		}
		return newNotice(TypeGap, space, id, CauseGap, detail, lost.From)
	})
	if err != nil {
		return fmt.Errorf("webhooks: disable subscriptions after lost %s: %w", lost, err)
	}
	return insertNotices(ctx, tx, notices)
}
