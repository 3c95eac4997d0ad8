package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// releaseLockSQL locks the subscription against every transaction that is
// giving it new deliveries (they hold FOR KEY SHARE, see leaseLiveSQL) and
// says whether the lease is still this job's.
var releaseLockSQL = `
SELECT ` + lease.MineSQL("$2") + `, status = 'active' OR probing, policy, now(), keeper_wake_at
FROM webhook_subscriptions WHERE id = $1 FOR UPDATE`

// nextDueSQL is when the subscription's next pending delivery is due: a
// retry's next attempt, a new one's creation; NULL when nothing is pending.
// It reads the subscription's first entry of webhook_deliveries_due, which
// is in that order; min() reads all its pending deliveries in every plan
// made while the table has no statistics.
const nextDueSQL = `
SELECT (SELECT coalesce(next_attempt_at, created_at) FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending'
        ORDER BY coalesce(next_attempt_at, created_at) LIMIT 1)`

const keeperSQL = `UPDATE webhook_subscriptions SET keeper_wake_at = $2 WHERE id = $1`

// release lets the subscription go once nothing is left for this sender.
// It says whether the job is done (its error is the job's result: nil, or
// a snooze); false means that deliveries arrived meanwhile and the sender
// goes on. An unordered subscription whose only pending deliveries wait
// for their retries is let go too, so that the rounds start a sender for
// new ones at once; this job comes back for the retries (keeper_wake_at),
// unless another keeper wakes in time.
func (s *sender) release(ctx context.Context) (done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	tx, err := s.d.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("deliver %s: begin release: %w", s.subID, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var mine, active bool
	var policy string
	var now time.Time
	var keeper *time.Time
	err = tx.QueryRow(ctx, releaseLockSQL, s.subID, s.me.jobID).Scan(&mine, &active, &policy, &now, &keeper)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !mine) {
		return true, nil // deleted, or disabled (which ended the lease), or taken over
	}
	if err != nil {
		return false, fmt.Errorf("deliver %s: lock for release: %w", s.subID, err)
	}
	var due *time.Time
	if active {
		if err := tx.QueryRow(ctx, nextDueSQL, s.subID).Scan(&due); err != nil {
			return false, fmt.Errorf("deliver %s: next due: %w", s.subID, err)
		}
	}
	if due != nil && (policy != webhooks.PolicyUnordered || !due.After(now)) {
		return false, nil // more arrived, or an ordered head waits: the steps see to it
	}
	if err := lease.Release(ctx, tx, s.subID); err != nil {
		return false, fmt.Errorf("deliver %s: %w", s.subID, err)
	}
	var wait *time.Duration
	if due != nil && (keeper == nil || !keeper.After(now) || keeper.After(*due)) {
		if _, err := tx.Exec(ctx, keeperSQL, s.subID, *due); err != nil {
			return false, fmt.Errorf("deliver %s: keeper: %w", s.subID, err)
		}
		w := due.Sub(now)
		wait = &w
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("deliver %s: commit release: %w", s.subID, err)
	}
	if wait != nil {
		return true, river.JobSnooze(*wait)
	}
	return true, nil
}
