package delivery_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// workerProcess is what a worker process runs for webhooks: its liveness
// lock and a River client with the delivery worker, under the lock's ID.
// One worker slot, so a process whose sender hangs fetches nothing else.
// River's own rescuer waits ten minutes and the claims last minutes, so
// neither explains a takeover within the test.
func workerProcess(t *testing.T, b *bundle, cfg *delivery.DeliverConfig) (*liveness.Holder, *river.Client[pgx.Tx]) {
	t.Helper()
	return workerProcessWith(t, b, cfg, 1)
}

// workerProcessWith is workerProcess with slots worker slots.
func workerProcessWith(t *testing.T, b *bundle, cfg *delivery.DeliverConfig, slots int) (*liveness.Holder, *river.Client[pgx.Tx]) {
	t.Helper()
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: b.db.URL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	del, err := delivery.NewDeliverer(b.db.Pool, postgres.NewEventLog(b.db.Pool, nil), nil, cfg)
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, del)
	rc, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
		ID:                   h.ID(),
		Queues:               map[string]river.QueueConfig{webhooks.Queue: {MaxWorkers: slots}},
		Workers:              workers,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		RescueStuckJobsAfter: 10 * time.Minute,
		Logger:               quiet,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.StopAndCancel(ctx)
	})
	return h, rc
}

// TestDelivery_TakesOverFromADeadSender: a sender hangs in its request and
// its process's session ends (as a SIGKILL ends it); the next job of the
// subscription, on another process, must take the claim over and deliver
// within seconds, although the claim itself would hold for minutes.
func TestDelivery_TakesOverFromADeadSender(t *testing.T) {
	t.Parallel()
	sent, got := deadSenderTakeover(t, nil)
	require.Equal(t, sent, got, "the dead sender's delivery first, then the next")
}

// deadSenderTakeover runs the takeover scenario for a subscription with
// policy (nil: the default, ordered): the first sender hangs in its
// request while the subscription's lease must name the sender's process;
// then that process's session ends and a new job, which only a live
// process can run, must deliver both events within seconds. It returns the
// two events' sequence numbers and those of the requests the receiver
// answered, in arrival order.
func deadSenderTakeover(t *testing.T, policy *webhooks.PolicyParams) (sent, got []int64) {
	t.Helper()
	cfg := fastRetries()
	cfg.Timeout = 2 * time.Minute // a lease holds for Timeout + 30 s
	cfg.LivenessSettle = time.Millisecond
	b := setup(t, cfg) // its River client only inserts the rounds' jobs
	rv, hung := hangingReceiver(t)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: policy})

	dead, _ := workerProcess(t, b, cfg)
	evs := b.emit(t, "s1", 1)
	b.round(t)
	select {
	case <-hung:
	case <-time.After(10 * time.Second):
		t.Fatal("the first sender never sent")
	}
	require.Equal(t, dead.ID(), leaseOwner(t, b, s.ID), "the lease names the sender's process")

	workerProcess(t, b, cfg)
	killedAt := time.Now()
	deadPID := dead.PID()
	require.NotZero(t, deadPID)
	require.NoError(t, dead.Close(context.Background()))
	// The server releases the lock once it has ended the session, a moment
	// after Close returns; a round before that sees the sender alive and
	// only wakes it (in a process, the rescuer would then step in).
	testwait.Until(t, 10*time.Second, func() bool {
		hs, err := liveness.Holders(context.Background(), b.db.Pool)
		require.NoError(t, err)
		return !slices.ContainsFunc(hs, func(s liveness.Session) bool { return uint32(s.PID) == deadPID })
	}, "the dead process's session ends")
	evs = append(evs, b.emit(t, "s1", 1)...)
	b.round(t) // a new job for the subscription, which only the live process can run

	// The hung request is never answered: the answered ones are the live
	// process's.
	answered := func() []int64 {
		var out []int64
		for _, a := range rv.Arrivals() {
			if a.OK() {
				out = append(out, a.Seq)
			}
		}
		return out
	}
	testwait.Until(t, 30*time.Second, func() bool { return len(answered()) >= 2 }, "the live process delivers both events")
	t.Logf("delivered after %s", time.Since(killedAt))
	return seqsOfEvents(evs), answered()
}

// leaseOwner is the process named by the subscription's lease, which must
// hold for more than a minute.
func leaseOwner(t *testing.T, b *bundle, sub uuid.UUID) string {
	t.Helper()
	var owner string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT lease_owner FROM webhook_subscriptions WHERE id = $1 AND lease_until > now() + interval '1 minute'`, sub).Scan(&owner))
	return owner
}

// hangingReceiver is a receiver whose first request never ends (until the
// test ends), as the request of a process that died while sending; hung is
// closed once that request has arrived. Later requests are served.
func hangingReceiver(t *testing.T) (rv *receiver, hung <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{})
	rv = newReceiver(t, nil)
	rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
		if a.N == 1 { // the dead process's request never ends
			close(arrived)
			return webhookstest.Answer{Hang: true}
		}
		return webhookstest.Answer{}
	})
	return rv, arrived
}
