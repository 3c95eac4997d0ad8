package webhooks_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// recordsOf counts what the database holds of a subscription: its row,
// deliveries, attempts and filter rows.
func (b *bundle) recordsOf(t testing.TB, id uuid.UUID) [4]int {
	t.Helper()
	var n [4]int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM webhook_subscriptions WHERE id = $1),
       (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1),
       (SELECT count(*) FROM webhook_attempts WHERE subscription_id = $1),
       (SELECT count(*) FROM webhook_subscription_filters WHERE subscription_id = $1)`, id).Scan(&n[0], &n[1], &n[2], &n[3]))
	return n
}

func TestDelete_RemovesItAndItsRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	failing := newReceiver(t, func(request, int) (int, map[string]string) { return 500, nil })
	ok := newReceiver(t, nil)
	gone, _ := b.subscribe(t, &webhooks.CreateParams{URL: failing.url(), EventTypes: []string{"item.*"}})
	kept, _ := b.subscribe(t, &webhooks.CreateParams{URL: ok.url()})
	b.start(t)
	b.emit(t, "s1", 3)
	b.round(t)
	// The receiver counts a request before its sender records it: wait for
	// the records of all three, so the snapshot below is final.
	testwait.Until(t, 10*time.Second, func() bool {
		return failing.count() >= 2 && ok.count() == 3 && b.recordsOf(t, kept.ID)[2] == 3
	}, "attempts on both")
	before := b.recordsOf(t, gone.ID)
	require.Equal(t, 1, before[0])
	require.Equal(t, 3, before[1])
	require.Positive(t, before[2])
	require.Equal(t, 1, before[3])
	keptBefore := b.recordsOf(t, kept.ID)

	n, err := webhooks.Delete(ctx, b.db.Pool, postgres.CursorStore{}, gone.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "it says how many delivery records went")
	require.Equal(t, [4]int{}, b.recordsOf(t, gone.ID), "row, deliveries, attempts and filters are gone")
	require.Equal(t, keptBefore, b.recordsOf(t, kept.ID), "another subscription's records stay")

	_, err = webhooks.Delete(ctx, b.db.Pool, postgres.CursorStore{}, gone.ID)
	require.ErrorIs(t, err, webhooks.ErrNotFound)
	_, err = webhooks.Get(ctx, b.db.Pool, gone.ID)
	require.ErrorIs(t, err, webhooks.ErrNotFound)

	b.emit(t, "s1", 1)
	b.round(t)
	require.Equal(t, keptBefore[1]+1, b.recordsOf(t, kept.ID)[1], "later rounds match only the subscription left")
	require.Equal(t, [4]int{}, b.recordsOf(t, gone.ID))
}

// TestDelete_InFlightDeliveryStops: the subscription is deleted while its
// sender waits for the receiver. The receiver then fails the request, which
// would be retried; instead the job finds the subscription gone at its
// next step and completes, and nothing more is sent.
func TestDelete_InFlightDeliveryStops(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	inRequest, release := make(chan struct{}), make(chan struct{})
	rv := newReceiver(t, func(r request, n int) (int, map[string]string) {
		if n == 1 && r.Seq > 0 {
			close(inRequest)
			<-release
		}
		return 500, nil
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	b.emit(t, "s1", 2)
	b.round(t)
	select {
	case <-inRequest:
	case <-time.After(10 * time.Second):
		t.Fatal("no request arrived")
	}

	_, err := webhooks.Delete(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
	require.NoError(t, err, "a send in flight holds no lock the delete waits for")
	close(release)

	var job *rivertype.JobRow
	testwait.Until(t, 10*time.Second, func() bool {
		res, err := b.river.JobList(ctx, river.NewJobListParams().Kinds(webhooks.KindDeliver))
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
		job = res.Jobs[0]
		return job.State == rivertype.JobStateCompleted
	}, "the delivery job completes once its subscription is gone")
	require.Empty(t, job.Errors, "ending is not an error")
	require.Equal(t, 1, rv.count(), "nothing is sent after the request in flight")
	require.Equal(t, [4]int{}, b.recordsOf(t, s.ID), "the outcome of the last request is not recorded")
}

// TestDelete_WaitsForTheRoundInFlight: a round that matched the
// subscription inserts its deliveries and checks the foreign key at the end
// of the statement. A delete committing in between would make that check
// fail and roll the whole round back, for every tenant. Delete waits for
// the round instead, then takes the round's new deliveries with it. A
// trigger holds the round inside its insert, after the match.
func TestDelete_WaitsForTheRoundInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
	_, err := b.db.Pool.Exec(ctx, `
CREATE FUNCTION test_hold_delivery_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(1); RETURN NEW; END $$;
CREATE TRIGGER test_hold BEFORE INSERT ON webhook_deliveries FOR EACH ROW EXECUTE FUNCTION test_hold_delivery_insert();`)
	require.NoError(t, err)
	b.emit(t, "s1", 1)

	roundDone := make(chan error, 1)
	go func() {
		_, err := b.rounds.Run(ctx, b.consumer)
		roundDone <- err
	}()
	testwait.Until(t, 10*time.Second, func() bool {
		var sleeping bool
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event = 'PgSleep')`).Scan(&sleeping))
		return sleeping
	}, "the round reaches its insert")

	n, err := webhooks.Delete(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
	require.NoError(t, err)
	require.NoError(t, <-roundDone, "the round commits")
	require.EqualValues(t, 1, n, "the delete waited and took the round's delivery with it")
	require.Equal(t, [4]int{}, b.recordsOf(t, s.ID))
	var cursor int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT last_seq FROM event_consumer_cursors WHERE name = $1`, webhooks.ConsumerName).Scan(&cursor))
	require.Positive(t, cursor, "the round moved on")
}
