package webhooks_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// highSeqs are where a seq stops fitting in an int4 and where it stops
// being exact in a float64: every statement that takes a seq must carry
// it as an int8 past both.
var highSeqs = []int64{1 << 31, 1 << 53}

// TestDeliveries_SeqsBeyondInt4 reads deliveries and attempts of seqs that
// an int4 parameter cannot hold: a page after one, one by its seq, the
// attempts of one.
func TestDeliveries_SeqsBeyondInt4(t *testing.T) {
	t.Parallel()
	for _, base := range highSeqs {
		t.Run(fmt.Sprint(base), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := context.Background()
			s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
			seqs := []int64{base, base + 1, base + 2}
			for _, seq := range seqs {
				_, err := b.db.Pool.Exec(ctx, `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, status, attempts, finished_at)
VALUES ($1, $2, gen_random_uuid(), 'delivered', 1, now())`, s.ID, seq)
				require.NoError(t, err)
				_, err = b.db.Pool.Exec(ctx, `INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds)
VALUES ($1, $2, now(), 204, 0.01)`, s.ID, seq)
				require.NoError(t, err)
			}
			seqsOf := func(ds []webhooks.Delivery) []int64 {
				out := make([]int64, len(ds))
				for i := range ds {
					out[i] = ds[i].Seq
				}
				return out
			}

			first, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Limit: 2})
			require.NoError(t, err)
			require.Equal(t, []int64{base + 2, base + 1}, seqsOf(first))
			next, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Limit: 2, BeforeSeq: base + 1})
			require.NoError(t, err, "the page after a seq beyond int4")
			require.Equal(t, []int64{base}, seqsOf(next))

			one, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Seq: base + 1})
			require.NoError(t, err, "one delivery by its seq")
			require.Equal(t, []int64{base + 1}, seqsOf(one))

			atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, base+1)
			require.NoError(t, err)
			require.Len(t, atts, 1)
			require.Equal(t, base+1, atts[0].Seq)
		})
	}
}

// TestDeliveries_OneSeq: Seq selects exactly the delivery of that seq,
// whatever the other filters' defaults, and none for a seq without one.
func TestDeliveries_OneSeq(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
	_, err := b.db.Pool.Exec(ctx, `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
SELECT $1, seq, gen_random_uuid() FROM generate_series(1, 3) AS seq`, s.ID)
	require.NoError(t, err)
	for _, seq := range []int64{1, 2, 3} {
		ds, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Seq: seq})
		require.NoError(t, err)
		require.Len(t, ds, 1)
		require.Equal(t, seq, ds[0].Seq)
	}
	ds, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Seq: 1 << 62})
	require.NoError(t, err)
	require.Empty(t, ds)
}

// TestPolicy_RetryBudgetBeyondInt4Milliseconds stores the longest retry
// budget allowed: 30 days is more milliseconds than an int4 holds.
func TestPolicy_RetryBudgetBeyondInt4Milliseconds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	budget := webhooks.MaxRetryBudget
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x", Policy: &webhooks.PolicyParams{RetryBudget: &budget}})
	got, err := webhooks.Get(context.Background(), b.db.Pool, s.ID)
	require.NoError(t, err)
	require.Equal(t, budget, got.Policy.RetryBudget)
}

// TestRotateSecret_OverlapOfAFractionOfASecond keeps the old secret for an
// overlap that is not a whole number of seconds.
func TestRotateSecret_OverlapOfAFractionOfASecond(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
	_, err := webhooks.RotateSecret(ctx, b.db.Pool, s.ID, 90500*time.Millisecond)
	require.NoError(t, err)
	var overlap float64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM previous_secret_until - updated_at)::float8
FROM webhook_subscriptions WHERE id = $1`, s.ID).Scan(&overlap))
	require.InDelta(t, 90.5, overlap, 0.001)
}
