package webhooks

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// deleteSQL deletes a subscription; its deliveries and its filter rows go
// with it (ON DELETE CASCADE), its attempts are deleted next
// (deleteAttemptsSQL). It returns whether the subscription existed and how
// many delivery records it had, counted in the same snapshot.
const deleteSQL = `
WITH n AS (SELECT count(*) AS deliveries FROM webhook_deliveries WHERE subscription_id = $1),
d AS (DELETE FROM webhook_subscriptions WHERE id = $1 RETURNING 1)
SELECT EXISTS (SELECT 1 FROM d), (SELECT deliveries FROM n)`

// deleteAttemptsSQL deletes a deleted subscription's attempts. It runs in a
// statement after deleteSQL, whose wait for the subscription's row lock
// lets a sender's record commit first: this statement's snapshot sees the
// attempts that record wrote.
const deleteAttemptsSQL = `DELETE FROM webhook_attempts WHERE subscription_id = $1`

// Delete removes a subscription with every record of it: deliveries of
// every status and their attempts. Nothing more is sent for it: a delivery
// job in flight finds the subscription gone at its next step and ends (the
// request it may be making at that moment is the last one, and its outcome
// is not recorded). It returns how many delivery records went with it.
//
// The delete waits for the webhooks consumer's round in flight, as Create
// does, so a round either finished before (its deliveries are deleted with
// the subscription) or starts after and no longer matches it; without the
// wait, a round that matched the subscription before the delete committed
// would fail on the foreign key and roll back for every tenant.
func Delete(ctx context.Context, q authz.Querier, rounds sync.RoundBarrier, id uuid.UUID) (int64, error) {
	var existed bool
	var deliveries int64
	err := atHead(ctx, q, rounds, func(tx pgx.Tx, _ int64) error {
		if err := tx.QueryRow(ctx, deleteSQL, id).Scan(&existed, &deliveries); err != nil || !existed {
			return err
		}
		_, err := tx.Exec(ctx, deleteAttemptsSQL, id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete webhook subscription %s: %w", id, err)
	}
	if !existed {
		return 0, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return deliveries, nil
}
