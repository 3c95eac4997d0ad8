package push

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/sync"
)

// ConsumerName is the push consumer's cursor row (migration 0004).
const ConsumerName = "push"

// Queue is the River queue push.deliver jobs run on, apart from the
// webhooks' so a slow webhook target never delays a notification.
const Queue = "push"

// DeliverArgs is one message to one device. It carries everything the
// message needs, so delivery never reads the event again (the event may have
// left the log by retention when a retry runs).
type DeliverArgs struct {
	RegistrationID uuid.UUID `json:"registration_id"`
	Principal      string    `json:"principal"`
	Space          string    `json:"space"`
	Seq            int64     `json:"seq"`
	EventID        uuid.UUID `json:"event_id"`
	Type           string    `json:"type"`
	// CommittedAt bounds retries: past push.ttl the message is stale.
	CommittedAt time.Time `json:"committed_at"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "push.deliver" }

// InsertOpts puts deliveries on their own queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: MaxAttempts}
}

// MaxAttempts bounds the tries of one message; with the backoff of
// DeliverWorker.NextRetry they span about a day, the default push.ttl.
const MaxAttempts = 12

// ConsumerConfig configures a Consumer.
type ConsumerConfig struct {
	// Disabled makes the consumer advance without creating jobs (VAPID keys
	// are not configured, so nothing could be sent). Default false.
	Disabled bool
}

// Consumer is the sync.Consumer named "push": for each event, one
// push.deliver job per device of every principal who may read the event's
// space, has not muted it, and is not the event's actor.
type Consumer struct {
	cfg ConsumerConfig
}

var _ sync.Consumer = (*Consumer)(nil)

// NewConsumer returns the push consumer.
func NewConsumer(cfg *ConsumerConfig) *Consumer {
	c := &Consumer{}
	if cfg != nil {
		c.cfg = *cfg
	}
	return c
}

// Name implements sync.Consumer.
func (c *Consumer) Name() string { return ConsumerName }

// receiversSQL finds the receiving devices of a whole batch in one
// statement: the events arrive as arrays, unnested with their position.
// Membership here is the cheap pre-filter (a current right of at least read,
// an active principal); the delivery job asks authz.Allowed again with the
// rights and token scopes as they are at send time (R-AZ-11), so this query
// only has to be no narrower than authz.
const receiversSQL = `
SELECT e.ord, r.id, r.principal
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS e(space, actor, ord)
JOIN space_members m ON m.space = e.space AND m."right" >= 'read' AND m.principal <> e.actor
JOIN principals p ON p.id = m.principal AND p.disabled_at IS NULL
JOIN push_registrations r ON r.principal = m.principal
WHERE NOT EXISTS (
    SELECT 1 FROM push_preferences pp
    WHERE pp.principal = m.principal AND pp.space = e.space AND NOT pp.notify)
ORDER BY e.ord, r.id`

// Handle implements sync.Consumer with one query per batch.
func (c *Consumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	if c.cfg.Disabled || len(events) == 0 {
		return nil, nil
	}
	spaces := make([]string, len(events))
	actors := make([]string, len(events))
	for i := range events {
		spaces[i], actors[i] = events[i].Space, events[i].Actor
	}
	rows, err := tx.Query(ctx, receiversSQL, spaces, actors)
	if err != nil {
		return nil, fmt.Errorf("push receivers: %w", err)
	}
	defer rows.Close()
	var jobs []sync.Job
	for rows.Next() {
		var ord int64
		var a DeliverArgs
		if err := rows.Scan(&ord, &a.RegistrationID, &a.Principal); err != nil {
			return nil, fmt.Errorf("push receivers: %w", err)
		}
		e := &events[ord-1]
		a.Space, a.Seq, a.EventID, a.Type, a.CommittedAt = e.Space, e.Seq, e.ID, e.Type, e.CommittedAt
		jobs = append(jobs, sync.Job{Args: a})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("push receivers: %w", err)
	}
	return jobs, nil
}
