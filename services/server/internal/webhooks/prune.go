package webhooks

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// pruneBatch bounds one DELETE, so pruning never holds many row locks or
// one long transaction.
const pruneBatch = 5000

// pruneSQL deletes up to $2 deliveries finished before $1 and their
// attempts; it counts the deliveries.
const pruneSQL = `
WITH d AS (
    DELETE FROM webhook_deliveries WHERE (subscription_id, event_seq) IN (
        SELECT subscription_id, event_seq FROM webhook_deliveries
        WHERE status <> 'pending' AND finished_at < $1 LIMIT $2)
    RETURNING subscription_id, event_seq
), a AS (
    DELETE FROM webhook_attempts a USING d WHERE a.subscription_id = d.subscription_id AND a.event_seq = d.event_seq
)
SELECT count(*) FROM d`

// Prune deletes finished deliveries (delivered, dead, skipped) that finished
// before before, with their attempts, and returns how many it deleted.
// Pending deliveries are never touched: ordering and gap detection rest on
// them.
func Prune(ctx context.Context, q authz.Querier, before time.Time) (int64, error) {
	var total int64
	for {
		var n int64
		err := q.QueryRow(ctx, pruneSQL, before, pruneBatch).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("prune webhook deliveries: %w", err)
		}
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}

// PruneArgs is the periodic job that keeps finished delivery records for as
// long as the events themselves (sync.event_retention), then deletes them.
type PruneArgs struct{}

// Kind implements river.JobArgs.
func (PruneArgs) Kind() string { return "webhooks.prune" }

// NewPruneWorker returns the worker of PruneArgs: it deletes finished
// deliveries older than keep.
func NewPruneWorker(db authz.Querier, keep time.Duration) river.Worker[PruneArgs] {
	return &pruneWorker{db: db, keep: keep}
}

type pruneWorker struct {
	river.WorkerDefaults[PruneArgs]
	db   authz.Querier
	keep time.Duration
}

func (w *pruneWorker) Work(ctx context.Context, _ *river.Job[PruneArgs]) error {
	_, err := Prune(ctx, w.db, time.Now().Add(-w.keep))
	return err
}
