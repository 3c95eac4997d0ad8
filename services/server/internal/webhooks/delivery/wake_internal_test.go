package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestWake_ReleaseRacingARound: a round gives a subscription new
// deliveries and sees its sender's lease live, so it inserts no job and
// only wakes the sender; at that moment the sender, finding nothing, lets
// the subscription go. The release must wait for the round (the FOR
// UPDATE of its lock against the round's FOR KEY SHARE), then see the new
// deliveries and keep the lease: otherwise they would have no sender at
// all. It fails when the release locks the row FOR NO KEY UPDATE.
func TestWake_ReleaseRacingARound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))
	sub, _, err := webhooks.Create(ctx, db.Pool, postgres.CursorStore{}, &webhooks.CreateParams{Owner: "alice", Space: "s1",
		URL: "http://127.0.0.1:9/hook", AllowPrivateTargets: true})
	require.NoError(t, err)
	const job = 42 // the lease of a live sender outside liveness
	_, err = db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET lease_job_id = $2, lease_until = now() + interval '1 minute' WHERE id = $1`, sub.ID, job)
	require.NoError(t, err)
	evs, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "bob"}}, nil
	})
	require.NoError(t, err)

	round, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = round.Rollback(ctx) }()
	jobs, err := webhooks.NewConsumer(nil).Handle(ctx, round, evs)
	require.NoError(t, err)
	require.Empty(t, jobs, "a live sender gets a wake-up, not a job")

	d, err := NewDeliverer(db.Pool, log, nil, &DeliverConfig{AllowPrivateTargets: true})
	require.NoError(t, err)
	s := &sender{d: d, subID: sub.ID, me: holder{jobID: job}}
	type result struct {
		done bool
		err  error
	}
	released := make(chan result, 1)
	go func() {
		done, err := s.release(ctx)
		released <- result{done, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !releaseWaitsForALock(t, db) {
		select {
		case r := <-released:
			t.Fatalf("the release did not wait for the round: done %v, err %v", r.done, r.err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the release never waited for the round's lock")
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	require.NoError(t, round.Commit(ctx))

	r := <-released
	require.NoError(t, r.err)
	require.False(t, r.done, "the sender sees the round's delivery and goes on")
	var holder *int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT lease_job_id FROM webhook_subscriptions WHERE id = $1`, sub.ID).Scan(&holder))
	require.NotNil(t, holder, "the lease is kept")
	require.EqualValues(t, job, *holder)
}

// releaseWaitsForALock says whether a session waits for a lock while it
// locks a subscription for its release.
func releaseWaitsForALock(t *testing.T, db *dbtest.DB) bool {
	t.Helper()
	var waiting bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
               AND query LIKE '%FOR UPDATE%' AND query LIKE '%lease_job_id = $2%')`).Scan(&waiting))
	return waiting
}

// TestIdleSenders_AJobThatEndsKeepsNoneOfTheLiveSendersWakeUps: a second
// job of a subscription in the process (it will find the first's lease
// live and end) registers and unregisters while the first sender lingers;
// the first must still be woken by the subscription's next deliveries,
// not wait out its linger.
func TestIdleSenders_AJobThatEndsKeepsNoneOfTheLiveSendersWakeUps(t *testing.T) {
	r := idleSenders{m: map[uuid.UUID][]senderEntry{}}
	sub, other := uuid.New(), uuid.New()
	live := r.add(sub, 1)
	ending := r.add(sub, 2)
	elsewhere := r.add(other, 3)
	r.remove(sub, ending)
	require.True(t, r.holds(sub, 1))
	require.False(t, r.holds(sub, 2), "the job that ended runs no more")
	require.False(t, r.holds(other, 1), "a job is its subscription's sender only")

	r.wake(sub.String())
	select {
	case <-live:
	default:
		t.Fatal("the live sender was not woken")
	}
	require.Empty(t, elsewhere, "another subscription's sender was woken")

	r.wake("")
	require.Len(t, live, 1, "a wake-up of every sender reaches it")
	require.Len(t, elsewhere, 1)
	r.remove(sub, live)
	r.remove(other, elsewhere)
	require.Empty(t, r.m)
}
