package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestConsumer_WakesTheLiveSenderWithoutAJob: while a subscription's
// sender holds it, a round that gives it new deliveries inserts no job and
// wakes the sender instead, which sends them at once rather than when its
// linger (here a minute) runs out.
func TestConsumer_WakesTheLiveSenderWithoutAJob(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Linger, cfg.Slice, cfg.MaxRun = time.Minute, 2*time.Minute, 2*time.Minute
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	b.emit(t, "s1", 1)
	require.Equal(t, 1, b.round(t).Jobs, "no sender yet: a job")
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "first delivery")

	for i := 2; i <= 4; i++ {
		b.emit(t, "s1", 1)
		require.Zero(t, b.round(t).Jobs, "round %d: the sender is live", i)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == i }, "delivery %d, well before the linger ends", i)
	}
	var jobs int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1`, webhooks.KindDeliver).Scan(&jobs))
	require.Equal(t, 1, jobs, "one job for four deliveries")
}

// TestConsumer_OneJobUntilItsSenderStarts: rounds that give a subscription
// deliveries before its job has started insert no further job: the first
// job's sender sends them all.
func TestConsumer_OneJobUntilItsSenderStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	evs := b.emit(t, "s1", 1)
	require.Equal(t, 1, b.round(t).Jobs)
	for range 3 {
		evs = append(evs, b.emit(t, "s1", 1)...)
		require.Zero(t, b.round(t).Jobs, "a job waits to start already")
	}
	b.start(t)
	b.waitDelivered(t, s.ID, seqsOfEvents(evs)...)
	require.Equal(t, seqsOfEvents(evs), seqsOf(rv.requests()))
}

// TestSender_KeepsItsSubscriptionAcrossRuns: a sender whose job's run
// ends while it waits for new deliveries yields its River slot keeping the
// subscription, so the next delivery of a steady trickle needs no new job.
func TestSender_KeepsItsSubscriptionAcrossRuns(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.MaxRun, cfg.Linger = 300*time.Millisecond, time.Minute
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	b.emit(t, "s1", 1)
	require.Equal(t, 1, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "first delivery")
	ctx := context.Background()
	testwait.Until(t, 10*time.Second, func() bool {
		var ended bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT coalesce((metadata->>'snoozes')::int, 0) > 0 OR state = 'completed'
			FROM river_job WHERE kind = $1`, webhooks.KindDeliver).Scan(&ended))
		return ended
	}, "the job's first run ended")
	b.emit(t, "s1", 1)
	require.Zero(t, b.round(t).Jobs, "the yielded sender still holds the subscription")
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 2 }, "second delivery")
	var jobs int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, webhooks.KindDeliver).Scan(&jobs))
	require.Equal(t, 1, jobs)
}

// TestSender_KeepsItsJobWhileItKeepsUp: a sender that keeps up with a
// trickle starts its slice again each time it catches up, so it keeps its
// job for the job's whole run instead of yielding at the end of each
// slice: every yield leaves the subscription without a running sender
// until River fetches the job again.
func TestSender_KeepsItsJobWhileItKeepsUp(t *testing.T) {
	t.Parallel()
	const slice = 300 * time.Millisecond
	cfg := fastRetries()
	cfg.Slice, cfg.MaxRun, cfg.Linger = slice, time.Minute, time.Minute
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	ctx := context.Background()
	var started time.Time
	for i := 1; ; i++ {
		b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == i }, "delivery %d", i)
		if i == 1 {
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT attempted_at FROM river_job WHERE kind = $1`,
				webhooks.KindDeliver).Scan(&started))
		}
		var ran float64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - $1::timestamptz)`, started).Scan(&ran))
		if time.Duration(ran*float64(time.Second)) > 3*slice {
			break
		}
	}
	var jobs, snoozes int
	var state string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*), max(state::text), max(coalesce((metadata->>'snoozes')::int, 0))
		FROM river_job WHERE kind = $1`, webhooks.KindDeliver).Scan(&jobs, &state, &snoozes))
	require.Equal(t, 1, jobs, "one job for the whole trickle")
	require.Zero(t, snoozes, "the sender never yielded its job")
	require.Equal(t, "running", state)
}

// TestSender_RecordsATrickleWithTheNextClaim: in a trickle, a batch that
// drained its subscription and was answered 2xx is recorded by the step
// that claims the next one, after the wake-up, not by a step of its own:
// a delivery costs one sender transaction, not two. The last one is
// recorded when the hold ends.
func TestSender_RecordsATrickleWithTheNextClaim(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Linger, cfg.Slice, cfg.MaxRun, cfg.RecordHold = time.Minute, 2*time.Minute, 2*time.Minute, time.Minute
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	const n = 6
	for i := 1; i <= n; i++ {
		b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == i }, "delivery %d", i)
	}
	b.waitCounter(t, "delivered", n-1)
	require.Equal(t, float64(n), b.steps(t), "one step per delivery: each records the one before and claims the next")
}

// TestSenders_StepTogether: the senders a round wakes at once record their
// last batches and claim their next in shared transactions, not in one
// transaction each.
func TestSenders_StepTogether(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	const n = 20
	cfg.Linger, cfg.Slice, cfg.MaxRun, cfg.RecordHold = time.Minute, 2*time.Minute, 2*time.Minute, time.Minute
	cfg.Senders = 2 * n // a slot to spare for each: a sender lingers only then
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	for range n {
		b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	}
	b.start(t)
	b.emit(t, "s1", 1)
	require.Equal(t, n, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == n }, "first deliveries")
	before := b.steps(t)

	b.emit(t, "s1", 1)
	require.Zero(t, b.round(t).Jobs, "every sender is live")
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 2*n }, "second deliveries")
	b.waitCounter(t, "delivered", n)
	require.Less(t, b.steps(t)-before, float64(n), "%d woken senders stepped in fewer transactions than one each", n)
}

// TestSenders_AGroupSkipsAHeldSubscription: a subscription whose row
// another transaction holds (an owner's change, a recover) delays its own
// sender only; the others woken with it send at once, whichever group they
// join.
func TestSenders_AGroupSkipsAHeldSubscription(t *testing.T) {
	t.Parallel()
	const others = 8
	cfg := fastRetries()
	cfg.Linger, cfg.Slice, cfg.MaxRun, cfg.RecordHold = time.Minute, 2*time.Minute, 2*time.Minute, time.Minute
	cfg.Senders = 4 * others
	b := setup(t, cfg)
	held, rv := newReceiver(t, nil), newReceiver(t, nil)
	for range others / 2 {
		b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	}
	hs, _ := b.subscribe(t, &webhooks.CreateParams{URL: held.url()})
	for range others / 2 {
		b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	}
	b.start(t)
	b.emit(t, "s1", 1)
	require.Equal(t, others+1, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool { return held.count() == 1 && rv.count() == others }, "first deliveries")

	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM webhook_subscriptions WHERE id = $1 FOR NO KEY UPDATE`, hs.ID)
	require.NoError(t, err)
	b.emit(t, "s1", 1)
	b.round(t)
	testwait.Until(t, 5*time.Second, func() bool { return rv.count() == 2*others }, "the other subscriptions' deliveries, while one is held")
	require.Equal(t, 1, held.count(), "the held subscription's sender waits for the row")
	require.NoError(t, tx.Rollback(ctx))
	testwait.Until(t, 10*time.Second, func() bool { return held.count() == 2 }, "the held subscription's delivery once the row is free")
}

// TestSender_AnUnorderedRetryEndsTheLinger: an unordered sender with
// nothing due but a retry due after its slice lingers for new deliveries;
// the retry falling due ends that linger, so it is sent then, not when the
// linger (here a minute) runs out. A linger is bounded by the job's run,
// not by its slice.
func TestSender_AnUnorderedRetryEndsTheLinger(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Slice, cfg.Linger, cfg.MaxRun = 100*time.Millisecond, time.Minute, 2*time.Minute
	b := setup(t, cfg)
	rv := newReceiver(t, func(_ request, n int) (int, map[string]string) {
		if n == 1 {
			return 500, nil
		}
		return 200, nil
	})
	// The retry comes after half a second to a second: past the slice.
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered),
		RetryBase: new(time.Second), RetryMax: new(time.Second), RetryBudget: new(time.Hour)}})
	b.start(t)
	evs := b.emit(t, "s1", 1)
	require.Equal(t, 1, b.round(t).Jobs)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "the first attempt")
	b.waitDelivered(t, s.ID, evs[0].Seq)
	require.Equal(t, []int{500, 200}, statuses(rv.requests()))
}

// statuses lists the statuses the receiver answered, in arrival order.
func statuses(rs []request) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Status
	}
	return out
}

// TestConsumer_WakesItsOwnProcesssSenderDirectly: a round wakes a live
// sender of its own process once it committed, without a notification on
// WakeChannel: here no listener runs, so only the direct wake-up can end
// the idle sender's minute-long linger before the test's deadline.
func TestConsumer_WakesItsOwnProcesssSenderDirectly(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Linger, cfg.Slice, cfg.MaxRun = time.Minute, 2*time.Minute, 2*time.Minute
	b := setup(t, cfg)
	b.consumer = webhooks.NewConsumer(&webhooks.ConsumerConfig{LivenessSettle: cfg.LivenessSettle, Local: b.deliverer})
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.startWithoutListener(t)
	for i := 1; i <= 3; i++ {
		evs := b.emit(t, "s1", 1)
		jobs := b.round(t).Jobs
		if i == 1 {
			require.Equal(t, 1, jobs, "no sender yet: a job")
		} else {
			require.Zero(t, jobs, "round %d: the sender is live", i)
		}
		// Recorded: the sender has stepped past the delivery and lingers,
		// idle, for new ones.
		b.waitDelivered(t, s.ID, evs[0].Seq)
		require.Equal(t, i, rv.count())
	}
}
