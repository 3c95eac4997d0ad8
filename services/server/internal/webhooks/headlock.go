package webhooks

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// atHead runs fn in a transaction that first waits for the webhooks
// consumer's round in flight, so that fn's reads of the log head and its
// write of a subscription's starting point are ordered against rounds.
//
// Without it, a subscription created "at the head" raced with a round: the
// round could read an event committed just after the subscription read the
// head, match it against a snapshot without the subscription, and move past
// it — a silently missing delivery (the soak found one). With the barrier, a
// round either finished before (and everything it consumed is at or below
// the head fn reads, taken after the barrier in a new statement) or starts
// after fn commits (and sees the subscription). fn gets the consumer's
// cursor: rounds read every event up to it and none after it.
func atHead(ctx context.Context, q authz.Querier, rounds sync.RoundBarrier, fn func(tx pgx.Tx, read int64) error) error {
	db, ok := q.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return errors.New("webhooks: the querier cannot begin a transaction")
	}
	if rounds == nil {
		return errors.New("webhooks: no round barrier")
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		read, err := rounds.WaitForRound(ctx, tx, ConsumerName)
		if err != nil {
			return err
		}
		return fn(tx, read)
	})
}
