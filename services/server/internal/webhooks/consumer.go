package webhooks

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// ConsumerName is the cursor name of the webhooks consumer (migration 0003).
const ConsumerName = "webhooks"

// Consumer is the webhooks consumer: in each round it records a delivery
// for every (active matching subscription, event) pair and enqueues one
// delivery job per subscription that got any (D-M2-26-2). It is also a
// sync.ConsumerLossHandler: a range lost to retention disables the
// subscriptions that could have missed events in it.
type Consumer struct{}

var (
	_ sync.Consumer            = (*Consumer)(nil)
	_ sync.ConsumerLossHandler = (*Consumer)(nil)
)

// NewConsumer returns the webhooks consumer.
func NewConsumer() *Consumer { return &Consumer{} }

// Name implements sync.Consumer.
func (*Consumer) Name() string { return ConsumerName }

// handleSQL matches the whole batch against the active subscriptions in one
// statement: events arrive as arrays, the join uses the partial index on
// space, and the unique key (subscription_id, event_seq) makes a replayed
// batch insert nothing. It returns, per subscription, the lowest new seq.
const handleSQL = `
WITH ev AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[]) AS e(seq, id, space, type)
), ins AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
    SELECT s.id, ev.seq, ev.id
    FROM ev JOIN webhook_subscriptions s ON s.space = ev.space AND s.status = 'active' AND ev.seq > s.resume_after_seq
    WHERE cardinality(s.event_types) = 0
       OR ev.type = ANY (s.event_types)
       OR EXISTS (SELECT 1 FROM unnest(s.event_types) p
                  WHERE p = '*' OR (right(p, 2) = '.*' AND starts_with(ev.type, left(p, -1))))
    ON CONFLICT (subscription_id, event_seq) DO NOTHING
    RETURNING subscription_id, event_seq
)
SELECT subscription_id, min(event_seq) FROM ins GROUP BY subscription_id ORDER BY subscription_id`

// Handle implements sync.Consumer.
func (*Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	n := len(events)
	seqs, ids := make([]int64, n), make([]uuid.UUID, n)
	spaces, types := make([]string, n), make([]string, n)
	for i := range events {
		seqs[i], ids[i], spaces[i], types[i] = events[i].Seq, events[i].ID, events[i].Space, events[i].Type
	}
	rows, err := tx.Query(ctx, handleSQL, seqs, ids, spaces, types)
	if err != nil {
		return nil, fmt.Errorf("webhooks: record deliveries: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (sync.Job, error) {
		var a DeliverArgs
		err := row.Scan(&a.SubscriptionID, &a.Seq)
		return sync.Job{Args: a}, err
	})
}

// HandleLost implements sync.ConsumerLossHandler. The events of the lost
// range cannot be read any more, so their spaces are unknown: every active
// subscription that existed before the range ended could have missed one,
// and is disabled with cause gap.
func (*Consumer) HandleLost(ctx context.Context, tx pgx.Tx, consumer string, lost sync.SeqRange) error {
	detail := fmt.Sprintf("events %s were removed by retention before the webhooks consumer read them", lost)
	_, err := tx.Exec(ctx, `
UPDATE webhook_subscriptions
SET status = 'disabled', disabled_cause = 'gap', disabled_detail = $2, disabled_at = now(), updated_at = now(),
    pump_job_id = NULL, pump_until = NULL
WHERE status = 'active' AND resume_after_seq < $1`, lost.To, detail)
	if err != nil {
		return fmt.Errorf("webhooks: disable subscriptions after lost %s: %w", lost, err)
	}
	return nil
}
