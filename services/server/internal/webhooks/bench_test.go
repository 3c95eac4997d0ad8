package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	gosync "sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// BenchmarkDeliveries measures deliveries per second to a local receiver,
// from the round that records them to the last 2xx, with the real round,
// a real River client and a real HTTP server. Every iteration delivers
// 2000 requests: 2000 events to 1 subscription, or 20 events to each of
// 100 subscriptions.
func BenchmarkDeliveries(b *testing.B) {
	for _, subs := range []int{1, 100} {
		b.Run(fmt.Sprintf("subscriptions=%d", subs), func(b *testing.B) { benchDeliveries(b, subs, 2000) })
	}
}

func benchDeliveries(b *testing.B, subs, total int) {
	cfg := fastRetries()
	cfg.Timeout = 10 * time.Second
	bn := setupConns(b, cfg, 24) // as database.max_conns would be set for a worker with 20 delivery slots
	var got gosync.Int64
	srv := recvtest.Start(b, &webhookstest.Options{Lean: true, OnArrival: func(webhookstest.Arrival) { got.Add(1) }})
	srv.Endpoint("").SetRule(webhookstest.Status(http.StatusNoContent))
	for range subs {
		bn.subscribe(b, &webhooks.CreateParams{URL: srv.URL("")})
	}
	bn.start(b)
	events := total / subs
	ctx := context.Background()
	var elapsed time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		want := got.Load() + int64(events*subs)
		bn.emit(b, "s1", events)
		b.StartTimer()
		start := time.Now()
		bn.round(b)
		deadline := time.Now().Add(5 * time.Minute)
		for got.Load() < want {
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d delivered", got.Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
		elapsed += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*events*subs)/elapsed.Seconds(), "deliveries/s")
	// The last outcome is recorded right after the receiver answered.
	testwait.Until(b, 10*time.Second, func() bool {
		var pending int
		require.NoError(b, bn.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'`).Scan(&pending))
		return pending == 0
	}, "every delivery recorded as delivered")
	require.Equal(b, int64(b.N*events*subs), got.Load(), "no duplicates")
}

// scanConsumer is the webhooks consumer as it matched before filters were
// looked up (webhook_subscription_filters): every event against every filter of every
// active subscription on its space. It is here only for
// BenchmarkRoundFilters to compare with.
type scanConsumer struct{}

func (scanConsumer) Name() string { return webhooks.ConsumerName }

func (scanConsumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	n := len(events)
	seqs, ids := make([]int64, n), make([]uuid.UUID, n)
	spaces, types := make([]string, n), make([]string, n)
	for i := range events {
		seqs[i], ids[i], spaces[i], types[i] = events[i].Seq, events[i].ID, events[i].Space, events[i].Type
	}
	rows, err := tx.Query(ctx, `
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
SELECT subscription_id, min(event_seq) FROM ins GROUP BY subscription_id ORDER BY subscription_id`, seqs, ids, spaces, types)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (sync.Job, error) {
		var a webhooks.DeliverArgs
		err := row.Scan(&a.SubscriptionID, &a.Seq)
		return sync.Job{Args: a}, err
	})
}

// BenchmarkRoundFilters measures one round of the webhooks consumer (ns/op)
// over a batch of 100 events on a space with 30 subscriptions of filters
// filters each. With deliveries=30 the last filter of each matches and
// every variant records the same 3000 deliveries and 30 jobs; with
// deliveries=0 none matches, as when one tenant's filters face another
// tenant's events, and the round's work is the matching alone.
// matching=lookup is the server's consumer, matching=scan the one it
// replaced. The same filters sit on another space too, so the lookup's
// table is not tiny. Variants alternate; run the whole benchmark twice or
// more, with -benchtime 3x (a scan round at 10,000 filters takes seconds).
func BenchmarkRoundFilters(b *testing.B) {
	for _, deliveries := range []int{0, 30} {
		for _, filters := range []int{1, 100, 10_000} {
			for _, matching := range []string{"scan", "lookup"} {
				b.Run(fmt.Sprintf("deliveries=%d/filters=%d/matching=%s", deliveries, filters, matching), func(b *testing.B) {
					var c sync.Consumer = scanConsumer{}
					if matching == "lookup" {
						c = webhooks.NewConsumer(nil)
					}
					benchRoundFilters(b, c, filters, deliveries > 0)
				})
			}
		}
	}
}

func benchRoundFilters(b *testing.B, c sync.Consumer, filters int, match bool) {
	const subs, events = 30, 100
	bn := setup(b, nil)
	ctx := context.Background()
	last := "noise.last"
	if match {
		last = "item.created"
	}
	for _, space := range []string{"s1", "s9"} {
		_, err := bn.db.Pool.Exec(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, event_types, resume_after_seq, last_delivered_seq)
SELECT gen_random_uuid(), 'alice', $1, 'http://127.0.0.1:9/x', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=',
       (SELECT coalesce(array_agg('noise.t' || g), '{}') FROM generate_series(1, $3::int - 1) g) || ARRAY[$4::text],
       e.last_seq, e.last_seq
FROM event_seq e, generate_series(1, $2::int)`, space, subs, filters, last)
		require.NoError(b, err)
	}
	_, err := bn.db.Pool.Exec(ctx, `ANALYZE webhook_subscriptions; ANALYZE webhook_subscription_filters`)
	require.NoError(b, err)
	jobs := 0
	if match {
		jobs = subs
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		bn.emit(b, "s1", events)
		b.StartTimer()
		res, err := bn.rounds.Run(ctx, c)
		require.NoError(b, err)
		require.Equal(b, events, res.Events)
		require.Equal(b, jobs, res.Jobs)
	}
}

// BenchmarkSlowReceiverBatches measures events per second to one ordered
// subscription whose receiver takes 200 ms per request, with max_batch 0
// (one event per request) and 100. Every iteration delivers 1000 events.
func BenchmarkSlowReceiverBatches(b *testing.B) {
	for _, batch := range []int{0, 100} {
		b.Run(fmt.Sprintf("max_batch=%d", batch), func(b *testing.B) {
			events := 1000
			if batch == 0 {
				events = 25 // 5 s a round at one event per request
			}
			bn := setup(b, nil)
			var got gosync.Int64
			srv := recvtest.Start(b, &webhookstest.Options{Lean: true, OnArrival: func(a webhookstest.Arrival) { got.Add(int64(len(a.Events))) }})
			// The delay is the receiver's own work.
			srv.Endpoint("").SetRule(webhookstest.Always(webhookstest.Answer{Status: http.StatusNoContent, Delay: 200 * time.Millisecond}))
			bn.subscribe(b, &webhooks.CreateParams{URL: srv.URL(""), Policy: &webhooks.PolicyParams{MaxBatch: new(batch)}})
			bn.start(b)
			var elapsed time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				want := got.Load() + int64(events)
				bn.emit(b, "s1", events)
				b.StartTimer()
				start := time.Now()
				bn.round(b)
				for got.Load() < want {
					time.Sleep(time.Millisecond)
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(events*b.N)/elapsed.Seconds(), "events/s")
		})
	}
}
