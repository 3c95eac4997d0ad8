package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestPrune_DeletesOnlyOldFinishedDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.emit(t, "s1", 4)
	b.round(t)
	// seq 1 delivered long ago, 2 dead long ago, 3 delivered just now, 4 pending.
	_, err := b.db.Pool.Exec(ctx, `
		UPDATE webhook_deliveries SET status = CASE event_seq - $2 WHEN 1 THEN 'delivered' WHEN 2 THEN 'dead' WHEN 3 THEN 'delivered' ELSE 'pending' END,
		       finished_at = CASE event_seq - $2 WHEN 1 THEN now() - interval '30 days' WHEN 2 THEN now() - interval '30 days'
		                                     WHEN 3 THEN now() ELSE NULL END
		WHERE subscription_id = $1`, s.ID, s.ResumeAfterSeq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `INSERT INTO webhook_attempts (subscription_id, event_seq, status_code) VALUES ($1, $2, 200)`, s.ID, s.ResumeAfterSeq+1)
	require.NoError(t, err)

	n, err := webhooks.Prune(ctx, b.db.Pool, time.Now().Add(-7*24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	var left []int64
	rows, err := b.db.Pool.Query(ctx, `SELECT event_seq - $2 FROM webhook_deliveries WHERE subscription_id = $1 ORDER BY 1`, s.ID, s.ResumeAfterSeq)
	require.NoError(t, err)
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		left = append(left, v)
	}
	require.Equal(t, []int64{3, 4}, left, "the recent and the pending deliveries stay")
	var attempts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_attempts WHERE subscription_id = $1`, s.ID).Scan(&attempts))
	require.Zero(t, attempts, "attempts go with their delivery")
}
