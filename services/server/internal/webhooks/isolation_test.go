package webhooks_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// oversizeSQL inserts $3 subscriptions of owner $1 on space $2 with $4
// filters each that match no event, straight into the table, as they could
// be before the limits existed.
const oversizeSQL = `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, event_types, resume_after_seq, last_delivered_seq)
SELECT gen_random_uuid(), $1, $2, 'http://127.0.0.1:9/old', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=',
       (SELECT array_agg('noise.t' || g) FROM generate_series(1, $4::int) g), e.last_seq, e.last_seq
FROM event_seq e, generate_series(1, $3::int)`

// noiseTypes returns n filters that match no event of the tests.
func noiseTypes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("noise.t%d", i)
	}
	return out
}

// attack gives mallory, on space s2, as many subscriptions as the
// default limits allow, each with as many filters as allowed, plus
// oversize subscriptions written before the limits (30 of 10,000 filters,
// the measured incident), and commits 1000 events on s2: the batch every
// round of the webhooks consumer has to get through first.
func attack(t testing.TB, b *bundle, oversize, filters int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, "mallory", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s2", Principal: "mallory", Right: authz.RightRead}))
	_, err := b.db.Pool.Exec(ctx, oversizeSQL, "mallory", "s2", oversize, filters)
	require.NoError(t, err)
	for range webhooks.DefaultMaxSubscriptionsPerSpace - oversize {
		b.subscribe(t, &webhooks.CreateParams{Owner: "mallory", Space: "s2", URL: "http://127.0.0.1:9/new",
			EventTypes: noiseTypes(webhooks.DefaultMaxEventTypes)})
	}
	_, _, err = webhooks.Create(ctx, b.db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "mallory", Space: "s2",
		URL: "http://127.0.0.1:9/new", AllowPrivateTargets: true})
	require.ErrorIs(t, err, webhooks.ErrLimit, "the space is full")
	b.emit(t, "s2", 1000)
}

// TestConsumer_TenantIsolation checks, at CI size, that one tenant's
// filters cannot stall the rounds: one tenant's subscriptions, at the
// limits and beyond them (rows from before the limits), in front of
// another tenant's events in the log. The other tenant's deliveries must
// arrive; with filters matched by a scan instead of a lookup, every round
// times out on the first batch and they never do.
func TestConsumer_TenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	attack(t, b, 30, 10_000)
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	evs := b.emit(t, "s1", 3)
	b.start(t)

	var failed atomic.Int64
	var lastErr atomic.Value
	w, err := sync.NewWorker(b.rounds, []sync.Consumer{b.consumer}, &sync.WorkerConfig{
		PollInterval: 50 * time.Millisecond,
		// Generous next to the tens of milliseconds these rounds take; the
		// incident's rounds took longer than the 30 s default.
		RoundTimeout: 5 * time.Second,
		Logger:       quiet,
		AfterRound: func(_ string, _ sync.RoundResult, err error) {
			if err != nil {
				failed.Add(1)
				lastErr.Store(err.Error())
			}
		},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	rounds := lazy(func() string { return fmt.Sprintf("%d failed rounds, the last: %v", failed.Load(), lastErr.Load()) })
	testwait.Until(t, 60*time.Second, func() bool { return rv.count() >= 3 }, "alice's 3 deliveries behind mallory's batch (%s)", rounds)
	require.Equal(t, []int64{evs[0].Seq, evs[1].Seq, evs[2].Seq}, seqsOf(rv.requests()))
}

// lazy is a message argument formatted only when the message is.
type lazy func() string

func (l lazy) String() string { return l() }
