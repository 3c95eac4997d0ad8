package webhooks_test

import (
	"context"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestConsumer_JobsOnlyForFreeSenders: a round adds a delivery job only for
// a subscription without a live sender. A claim is live while it is
// unexpired and its process takes no part in liveness or holds its
// liveness lock; an expired claim, or one whose process's lock is free,
// is free.
func TestConsumer_JobsOnlyForFreeSenders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	rv := newReceiver(t, nil)
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: b.db.URL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(ctx))
	t.Cleanup(func() { _ = h.Close(context.Background()) })

	claims := []struct {
		name  string
		until string
		owner *string
		job   bool
	}{
		{name: "NoClaim", job: true},
		{name: "LiveOutsideLiveness", until: "1 minute"},
		{name: "LiveProcess", until: "1 minute", owner: ptr(h.ID())},
		{name: "Expired", until: "-1 second", job: true},
		{name: "DeadProcess", until: "1 minute", owner: ptr(liveness.NewID()), job: true},
	}
	want := map[uuid.UUID]string{}
	for i, c := range claims {
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		if c.until != "" {
			_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET pump_job_id = $2, pump_until = now() + $3::interval, pump_owner = $4 WHERE id = $1`,
				s.ID, int64(1000+i), c.until, c.owner)
			require.NoError(t, err)
		}
		if c.job {
			want[s.ID] = c.name
		}
	}
	evs := b.emit(t, "s1", 1)
	b.round(t)

	var pending int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE event_seq = $1 AND status = 'pending'`, evs[0].Seq).Scan(&pending))
	require.Equal(t, len(claims), pending, "every subscription gets its delivery")
	got := map[uuid.UUID]string{}
	for _, id := range deliverJobs(t, b) {
		got[id] = want[id]
		require.Contains(t, want, id, "a job for a subscription with a live sender")
	}
	require.Equal(t, want, got, "a job for every subscription without a live sender")
}

// TestConsumer_RoundAndReleaseRace plays both orders of a round that adds a
// delivery and the subscription's sender giving up its claim, and checks
// that the delivery is sent either way: the round finds the row held by
// the releasing sender and adds a job; or the round holds the row, adds no
// job, and the sender's look waits for it. Had the round trusted the claim
// without holding the row, it would add no job either way, and the sender,
// whose look for pending deliveries did not see the round's, would leave
// the delivery with nobody to send it.
func TestConsumer_RoundAndReleaseRace(t *testing.T) {
	t.Parallel()

	t.Run("SenderReleasesWhileTheRoundCommits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		del := senderProcess(t, b)
		paused, resume := make(chan struct{}), make(chan struct{})
		var once gosync.Once
		webhooks.SetAfterRelease(del, func(id uuid.UUID) {
			if id == s.ID {
				once.Do(func() { close(paused); <-resume })
			}
		})
		resumed := false
		t.Cleanup(func() {
			if !resumed {
				close(resume)
			}
		})

		evs := b.emit(t, "s1", 1)
		b.round(t)
		waitFor(t, paused, "the sender found nothing more to send and gave up its claim")

		// The sender's transaction is open: it has looked for pending
		// deliveries and released its claim. A round now adds one.
		evs = append(evs, b.emit(t, "s1", 1)...)
		done := runRound(t, b, b.consumer)
		waitFor(t, done, "the round waited for the sender") // the row is held: the round adds a job
		resumed = true
		close(resume)

		eventually(t, 15*time.Second, func() bool { return rv.count() >= 2 }, "the round's delivery was left without a sender")
		require.Equal(t, []int64{evs[0].Seq, evs[1].Seq}, seqsOf(rv.requests()))
	})

	t.Run("RoundCommitsWhileTheSenderLooks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		answer := make(chan struct{})
		answered := false
		rv := newReceiver(t, nil)
		inFlight := make(chan struct{}, 1)
		rv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case inFlight <- struct{}{}:
				<-answer // the first request is answered when the test says
			default:
			}
			rv.serve(w, r)
		})
		t.Cleanup(func() {
			if !answered {
				close(answer)
			}
		})
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		senderProcess(t, b)

		evs := b.emit(t, "s1", 1)
		b.round(t)
		waitFor(t, inFlight, "the sender never sent") // it holds the claim

		// A round adds a delivery and, holding it uncommitted, waits; the
		// sender records its 2xx and looks for the next delivery.
		evs = append(evs, b.emit(t, "s1", 1)...)
		c := &handledConsumer{Consumer: b.consumer, handled: make(chan int, 1), release: make(chan struct{})}
		released := false
		t.Cleanup(func() { // let a failed test's round end, so the pool can close
			if !released {
				close(c.release)
			}
		})
		done := runRound(t, b, c)
		var jobs int
		select {
		case jobs = <-c.handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the round never handled its events")
		}
		require.Zero(t, jobs, "no job: the subscription's sender is live")
		answered = true
		close(answer)
		eventually(t, 10*time.Second, func() bool {
			return lockWaits(t, b) > 0 || b.deliveryStatus(t, s.ID, evs[0].Seq) == webhooks.DeliveryDelivered
		}, "the sender neither waited for the round nor recorded its 2xx")
		t.Logf("the sender waited for the round's row lock: %v", lockWaits(t, b) > 0)
		released = true
		close(c.release)
		<-done

		eventually(t, 15*time.Second, func() bool { return rv.count() >= 2 }, "the round's delivery was left without a sender")
		require.Equal(t, []int64{evs[0].Seq, evs[1].Seq}, seqsOf(rv.requests()))
	})
}

// handledConsumer holds a round after its Handle, with the round's
// deliveries and row locks uncommitted, until released; it reports how
// many jobs the round adds.
type handledConsumer struct {
	*webhooks.Consumer
	handled chan int
	release chan struct{}
}

func (c *handledConsumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	jobs, err := c.Consumer.Handle(ctx, tx, events)
	c.handled <- len(jobs)
	<-c.release
	return jobs, err
}

// senderProcess starts a River client that runs delivery jobs with one
// worker, as a process outside liveness, and returns its Deliverer.
func senderProcess(t *testing.T, b *bundle) *webhooks.Deliverer {
	t.Helper()
	del, err := webhooks.NewDeliverer(b.db.Pool, postgres.NewEventLog(b.db.Pool, nil), nil, fastRetries())
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, del)
	rc, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{webhooks.Queue: {MaxWorkers: 1}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quiet,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.StopAndCancel(ctx)
	})
	return del
}

// runRound runs one round of c; the channel closes when it has ended.
func runRound(t *testing.T, b *bundle, c sync.Consumer) chan struct{} {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := b.rounds.Run(context.Background(), c)
		require.NoError(t, err)
	}()
	return done
}

// lockWaits counts the sessions of the test's database waiting for a lock.
func lockWaits(t *testing.T, b *bundle) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
	return n
}

func waitFor(t *testing.T, c <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}

// deliverJobs returns the subscriptions of the delivery jobs in River.
func deliverJobs(t *testing.T, b *bundle) []uuid.UUID {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(), `SELECT (args->>'subscription_id')::uuid FROM river_job WHERE kind = $1`, webhooks.KindDeliver)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

func ptr[T any](v T) *T { return &v }
