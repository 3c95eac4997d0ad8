package webhooks

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// atHead runs fn in a transaction that first locks the webhooks consumer's
// cursor row, waiting for a round in flight to commit, so that fn's reads of
// the log head and its write of a subscription's starting point are ordered
// against rounds (D-M2-26-11).
//
// Without it, a subscription created "at the head" raced with a round: the
// round could read an event committed just after the subscription read the
// head, match it against a snapshot without the subscription, and move past
// it — a silently missing delivery (the soak found one). With the lock, a
// round either finished before (and everything it consumed is at or below
// the head fn reads, taken after the lock in a new statement) or starts after
// fn commits (and sees the subscription).
func atHead(ctx context.Context, q authz.Querier, fn func(tx pgx.Tx) error) error {
	db, ok := q.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return errors.New("webhooks: the querier cannot begin a transaction")
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM event_consumer_cursors WHERE name = $1 FOR UPDATE`, ConsumerName); err != nil {
			return fmt.Errorf("lock the %s consumer's cursor: %w", ConsumerName, err)
		}
		return fn(tx)
	})
}
