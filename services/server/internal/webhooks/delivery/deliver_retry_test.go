package delivery_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// unreadableLog is an event source whose reads fail, as they do while the
// database is unavailable.
type unreadableLog struct{ sync.EventSource }

func (unreadableLog) EventsAfter(context.Context, pgx.Tx, *sync.EventsAfterParams) ([]sync.Event, error) {
	return nil, errors.New("event log unreachable")
}

func (unreadableLog) EventsAt(context.Context, pgx.Tx, []int64) ([]sync.Event, error) {
	return nil, errors.New("event log unreachable")
}

// QueueEventsAt queues a read that fails.
func (unreadableLog) QueueEventsAt(b *pgx.Batch, _ []int64, _ *[]sync.Event) {
	b.Queue(`SELECT 1/0`)
}

// TestDelivery_RetriesWithinSecondsAfterDatabaseTrouble: a delivery job
// that fails (here, reading its event fails) comes back within seconds,
// also after its second and later failures, where River's default backoff
// waits attempt⁴ seconds (16 s, 81 s, 256 s).
func TestDelivery_RetriesWithinSecondsAfterDatabaseTrouble(t *testing.T) {
	t.Parallel()
	b := setupWith(t, &bundleOpts{source: func(src sync.EventSource) sync.EventSource { return unreadableLog{src} }})
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.emit(t, "s1", 1)
	require.Equal(t, 1, b.round(t).Jobs)
	b.start(t)

	var attempt int
	var last, next time.Time
	testwait.Until(t, 30*time.Second, func() bool {
		err := b.db.Pool.QueryRow(context.Background(), `
SELECT attempt, attempted_at, scheduled_at FROM river_job WHERE kind = $1 AND state = 'retryable'`,
			webhooks.KindDeliver).Scan(&attempt, &last, &next)
		return err == nil && attempt >= 2
	}, "the delivery job did not fail twice")
	riverDefault := time.Duration(attempt*attempt*attempt*attempt) * time.Second
	require.Less(t, next.Sub(last), riverDefault/2, "retry %d scheduled %s after the failed run", attempt, next.Sub(last))
	require.Zero(t, rv.count(), "nothing was sent")
}
