package webhooks_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// write commits one event per type, of space, in one transaction.
func (b *bundle) write(t testing.TB, space string, types ...string) []sync.Event {
	t.Helper()
	evs, err := b.log.Write(context.Background(), func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		out := make([]sync.NewEvent, len(types))
		for i, typ := range types {
			out[i] = sync.NewEvent{Space: space, Type: typ, Actor: "bob"}
		}
		return out, nil
	})
	require.NoError(t, err)
	return evs
}

// dropBefore simulates retention: every event below seq leaves the log,
// as a dropped partition takes them, and the retention mark says so.
func (b *bundle) dropBefore(t testing.TB, seq int64) {
	t.Helper()
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq < $1`, seq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, seq)
	require.NoError(t, err)
}

func (b *bundle) resend(id uuid.UUID, seq int64) (*webhooks.Delivery, error) {
	return webhooks.Resend(context.Background(), b.db.Pool, &webhooks.ResendParams{SubscriptionID: id, Seq: seq, Events: b.log, Jobs: b.river})
}

func (b *bundle) recover(p webhooks.RecoverParams) (*webhooks.RecoverResult, error) {
	p.Events, p.Jobs = b.log, b.river
	return webhooks.Recover(context.Background(), b.db.Pool, &p)
}

func (b *bundle) enableFromBacklog(t testing.TB, id uuid.UUID) *webhooks.EnableResult {
	t.Helper()
	res, err := webhooks.EnableFromBacklog(context.Background(), b.db.Pool, postgres.CursorStore{},
		&webhooks.EnableBacklogParams{ID: id, Events: b.log, Jobs: b.river})
	require.NoError(t, err)
	return res
}

// waitDelivered waits until every seq's delivery of subscription id is
// delivered.
func (b *bundle) waitDelivered(t testing.TB, id uuid.UUID, seqs ...int64) {
	t.Helper()
	for _, seq := range seqs {
		testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, id, seq) == webhooks.DeliveryDelivered },
			"delivery %d delivered", seq)
	}
}

// okSeqs lists the seqs of the requests answered 2xx, in arrival order.
func okSeqs(rs []request) []int64 {
	var out []int64
	for _, r := range rs {
		if r.Status >= 200 && r.Status < 300 {
			out = append(out, r.Seq)
		}
	}
	return out
}

func seqs(evs ...sync.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// pausingSource is an event source whose pauseAt-th EventsAfter call
// waits until release.
type pausingSource struct {
	sync.EventSource
	calls   atomic.Int32
	pauseAt int32
	paused  chan struct{}
	release chan struct{}
}

func (s *pausingSource) EventsAfter(ctx context.Context, tx pgx.Tx, p *sync.EventsAfterParams) ([]sync.Event, error) {
	if s.calls.Add(1) == s.pauseAt {
		close(s.paused)
		<-s.release
	}
	return s.EventSource.EventsAfter(ctx, tx, p)
}

// barrierFunc is a sync.RoundBarrier made of a function.
type barrierFunc func(ctx context.Context, tx pgx.Tx, consumer string) (int64, error)

func (f barrierFunc) WaitForRound(ctx context.Context, tx pgx.Tx, consumer string) (int64, error) {
	return f(ctx, tx, consumer)
}

func TestResend(t *testing.T) {
	t.Parallel()

	// A resend is a new request for the same event: the receiver, which
	// checks every signature with the Standard Webhooks library, gets it
	// twice with the same webhook-id, and the delivery is delivered again
	// with both attempts on record.
	t.Run("SendsAgainWithTheSameWebhookID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		rv.setSecret(t, secret)
		b.start(t)
		evs := b.emit(t, "s1", 2)
		b.round(t)
		b.waitDelivered(t, s.ID, seqs(evs...)...)
		before, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, EventID: evs[0].ID})
		require.NoError(t, err)
		require.Len(t, before, 1)
		require.Nil(t, before[0].ResentAt)

		d, err := b.resend(s.ID, evs[0].Seq)
		require.NoError(t, err)
		require.Equal(t, webhooks.DeliveryPending, d.Status)
		require.Equal(t, evs[0].ID, d.EventID)
		// The resend keeps the delivery's creation time and is recorded
		// on its own.
		require.True(t, before[0].CreatedAt.Equal(d.CreatedAt), "created_at %s, then %s", before[0].CreatedAt, d.CreatedAt)
		require.NotNil(t, d.ResentAt)
		require.True(t, d.ResentAt.After(before[0].CreatedAt))
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 3 }, "the resent request arrives")
		b.waitDelivered(t, s.ID, evs[0].Seq)

		reqs := rv.requests()
		require.Equal(t, []int64{evs[0].Seq, evs[1].Seq, evs[0].Seq}, seqsOf(reqs))
		for _, r := range reqs {
			require.NoError(t, r.SigErr, "seq %d", r.Seq)
		}
		require.Equal(t, evs[0].ID.String(), reqs[0].ID)
		require.Equal(t, reqs[0].ID, reqs[2].ID, "the same webhook-id: receivers drop the repeat by it")
		atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, evs[0].Seq)
		require.NoError(t, err)
		require.Len(t, atts, 2)
		ds, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID})
		require.NoError(t, err)
		require.Equal(t, 2, ds[1].Attempts, "attempts count both sends")
		require.True(t, before[0].CreatedAt.Equal(ds[1].CreatedAt), "delivered again, it keeps its creation time")
		require.NotNil(t, ds[1].ResentAt)
		require.True(t, d.ResentAt.Equal(*ds[1].ResentAt))
	})

	// An ordered subscription sends its pending deliveries in seq order, so
	// a resent older delivery is the head: it goes out right after the one
	// in flight, before newer pending ones.
	t.Run("OlderSeqGoesBeforeNewerPendingOnes", func(t *testing.T) {
		t.Parallel()
		// A resend joins at the sender's next claim: after the batch in
		// flight, here one delivery.
		cfg := fastRetries()
		cfg.BatchSize = 1
		b := setup(t, cfg)
		rv := newReceiver(t, nil)
		var hold atomic.Int64 // seq whose first request waits for release
		holding := make(chan struct{})
		rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
			if a.Seq == hold.Load() && a.Attempt == 1 {
				close(holding)
				return webhookstest.Answer{Hang: true}
			}
			return webhookstest.Answer{}
		})
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		b.start(t)
		first := b.emit(t, "s1", 3)
		b.round(t)
		b.waitDelivered(t, s.ID, seqs(first...)...)

		later := b.emit(t, "s1", 3)
		hold.Store(later[0].Seq)
		b.round(t)
		<-holding // the sender is in the request of later[0]; later[1:] are pending
		_, err := b.resend(s.ID, first[1].Seq)
		require.NoError(t, err)
		rv.Release()

		b.waitDelivered(t, s.ID, seqs(later...)...)
		b.waitDelivered(t, s.ID, first[1].Seq)
		require.Equal(t, []int64{first[0].Seq, first[1].Seq, first[2].Seq, later[0].Seq, first[1].Seq, later[1].Seq, later[2].Seq},
			okSeqs(rv.requests()), "the resent seq goes after the request in flight and before the newer pending ones")
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		evs := b.emit(t, "s1", 3)
		b.round(t) // River is not started: the deliveries stay pending

		_, err := b.resend(s.ID, evs[0].Seq)
		require.ErrorIs(t, err, webhooks.ErrConflict)
		require.ErrorContains(t, err, "pending already")
		_, err = b.resend(s.ID, evs[2].Seq+10)
		require.ErrorIs(t, err, webhooks.ErrDeliveryNotFound)
		_, err = b.resend(uuid.New(), evs[0].Seq)
		require.ErrorIs(t, err, webhooks.ErrNotFound)

		_, err = b.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'dead', finished_at = now() WHERE subscription_id = $1`, s.ID)
		require.NoError(t, err)
		b.dropBefore(t, evs[1].Seq)
		_, err = b.resend(s.ID, evs[0].Seq)
		require.ErrorIs(t, err, webhooks.ErrConflict)
		require.ErrorContains(t, err, "left the log")
		require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[0].Seq), "no gap at the head to disable it")

		require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
		_, err = b.resend(s.ID, evs[1].Seq)
		require.ErrorIs(t, err, webhooks.ErrForbidden, "the owner must still be allowed to receive the space's events")
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))

		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		_, err = b.resend(s.ID, evs[1].Seq)
		require.ErrorIs(t, err, webhooks.ErrConflict)
		require.ErrorContains(t, err, "disabled")
		require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[1].Seq))
	})
}

func TestRecover(t *testing.T) {
	t.Parallel()

	// Dead (refused by authz), skipped (by an enable at the head) and never
	// recorded events (committed before the subscription existed and while
	// it was disabled) of a seq range are sent in seq order; delivered ones
	// and other spaces' or types' events are not.
	t.Run("BySeqRangeSendsDeadSkippedAndUnrecordedInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		var failing atomic.Int64 // seq answered 500
		rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
			if r.Seq == failing.Load() {
				return http.StatusInternalServerError, nil
			}
			return http.StatusOK, nil
		})
		before := b.write(t, "s1", "item.created")[0]
		s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*"}})
		rv.setSecret(t, secret)
		b.start(t)

		e1 := b.write(t, "s1", "item.created")[0]
		b.round(t)
		b.waitDelivered(t, s.ID, e1.Seq)

		require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
		dead := b.write(t, "s1", "item.created", "item.updated")
		b.round(t)
		for _, e := range dead {
			testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, s.ID, e.Seq) == webhooks.DeliveryDead }, "dead")
		}
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))

		skipped := b.write(t, "s1", "item.created")[0]
		failing.Store(skipped.Seq)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 2 }, "the failing delivery is tried")
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		whileDisabled := b.write(t, "s1", "item.created", "note.deleted")
		other := b.write(t, "s2", "item.created")[0]
		b.round(t)
		_, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
		require.NoError(t, err)
		require.Equal(t, webhooks.DeliverySkipped, b.deliveryStatus(t, s.ID, skipped.Seq))
		after := b.write(t, "s1", "item.created")[0]
		b.round(t)
		b.waitDelivered(t, s.ID, after.Seq)
		failing.Store(0)

		sent := len(okSeqs(rv.requests()))
		res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: before.Seq, ToSeq: after.Seq, BeforeCreation: true})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: before.Seq, To: after.Seq}, res.Range)
		require.Equal(t, int64(3), res.Reset, "two dead, one skipped")
		require.Equal(t, int64(2), res.Created, "one before the subscription, one while disabled")
		require.Zero(t, res.Lost.Len())
		want := []int64{before.Seq, dead[0].Seq, dead[1].Seq, skipped.Seq, whileDisabled[0].Seq}
		b.waitDelivered(t, s.ID, want...)
		require.Equal(t, want, okSeqs(rv.requests())[sent:], "in seq order, each once; %d (note.*), %d (s2) and delivered ones not",
			whileDisabled[1].Seq, other.Seq)
		for _, r := range rv.requests() {
			require.NoError(t, r.SigErr)
		}

		again, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: before.Seq, BeforeCreation: true})
		require.NoError(t, err)
		require.Zero(t, again.Reset+again.Created, "everything is delivered now")
	})

	// A time range selects the events committed at or after since and
	// before until.
	t.Run("ByTimeRange", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		b.start(t)
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		early := b.emit(t, "s1", 2)
		middle := b.emit(t, "s1", 2)
		late := b.emit(t, "s1", 2)
		b.round(t)
		_, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
		require.NoError(t, err)
		require.True(t, early[1].CommittedAt.Before(middle[0].CommittedAt) && middle[1].CommittedAt.Before(late[0].CommittedAt))

		res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, Since: middle[0].CommittedAt, Until: late[0].CommittedAt})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: middle[0].Seq, To: middle[1].Seq}, res.Range)
		require.Equal(t, int64(2), res.Created)
		require.True(t, res.LostSince.IsZero())
		b.waitDelivered(t, s.ID, seqs(middle...)...)
		require.Equal(t, seqs(middle...), seqsOf(rv.requests()))

		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, Since: late[0].CommittedAt.Add(-time.Microsecond)})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: late[0].Seq, To: late[1].Seq}, res.Range, "no until: up to the head")
		b.waitDelivered(t, s.ID, seqs(late...)...)
	})

	// The part of a range retention removed is reported, exactly, and the
	// rest is recovered.
	t.Run("RangePartlyLostToRetention", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		bySeq, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url() + "?seq"})
		byTime, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url() + "?time"})
		b.start(t)
		for _, s := range []*webhooks.Subscription{bySeq, byTime} {
			require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		}
		evs := b.emit(t, "s1", 5)
		b.round(t)
		for _, s := range []*webhooks.Subscription{bySeq, byTime} {
			_, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
			require.NoError(t, err)
		}
		b.dropBefore(t, evs[2].Seq)

		res, err := b.recover(webhooks.RecoverParams{SubscriptionID: bySeq.ID, FromSeq: evs[0].Seq, ToSeq: evs[4].Seq + 100})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: evs[0].Seq, To: evs[1].Seq}, res.Lost, "exactly the removed seqs of the range")
		require.Equal(t, sync.SeqRange{From: evs[2].Seq, To: evs[4].Seq}, res.Range, "the rest, up to the head")
		require.Equal(t, int64(3), res.Created)
		b.waitDelivered(t, bySeq.ID, seqs(evs[2:]...)...)

		since := evs[0].CommittedAt.Add(-time.Second)
		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: byTime.ID, Since: since, Until: time.Now().Add(time.Minute)})
		require.NoError(t, err)
		require.Zero(t, res.Lost.Len())
		require.Equal(t, since, res.LostSince)
		require.Equal(t, evs[2].CommittedAt, res.LostUntil, "gone up to the oldest retained event, and nothing after it")
		require.Equal(t, sync.SeqRange{From: evs[2].Seq, To: evs[4].Seq}, res.Range)
		require.Equal(t, int64(3), res.Created)
		b.waitDelivered(t, byTime.ID, seqs(evs[2:]...)...)

		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: byTime.ID, Since: evs[2].CommittedAt})
		require.NoError(t, err)
		require.True(t, res.LostSince.IsZero(), "a window from the oldest retained event lost nothing")
		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: bySeq.ID, FromSeq: evs[0].Seq, ToSeq: evs[1].Seq})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: evs[0].Seq, To: evs[1].Seq}, res.Lost)
		require.Zero(t, res.Range.Len(), "all of it is gone")
	})

	// A recover holds its subscription's row until it commits; the round,
	// which makes deliveries for that subscription meanwhile, does not wait
	// for it.
	t.Run("RoundsDoNotWaitForIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		missed := b.emit(t, "s1", 2)
		b.round(t)
		_, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
		require.NoError(t, err)

		src := &pausingSource{EventSource: b.log, pauseAt: 2, paused: make(chan struct{}), release: make(chan struct{})}
		released := false
		t.Cleanup(func() {
			if !released {
				close(src.release)
			}
		})
		done := make(chan error, 1)
		go func() {
			_, err := webhooks.Recover(ctx, b.db.Pool, &webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: missed[0].Seq,
				ToSeq: missed[1].Seq, Events: src, Jobs: b.river})
			done <- err
		}()
		<-src.paused // the recover holds the row and reads the range

		later := b.emit(t, "s1", 1)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		res, err := b.rounds.Run(rctx, b.consumer)
		require.NoError(t, err, "the round waited for the recover")
		require.Equal(t, 1, res.Jobs)
		require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, later[0].Seq))

		released = true
		close(src.release)
		require.NoError(t, <-done)
		b.start(t)
		b.waitDelivered(t, s.ID, seqs(append(missed, later...)...)...)
		require.Equal(t, seqs(append(missed, later...)...), seqsOf(rv.requests()))
	})

	t.Run("StartsAtTheCreationAndRefusesEarlierSeqsUnlessAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		before := b.emit(t, "s1", 2)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		after := b.emit(t, "s1", 2)
		b.round(t)
		_, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
		require.NoError(t, err)

		res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: after[0].Seq, To: after[1].Seq}, res.Range, "from the first seq after the creation")
		require.Equal(t, int64(2), res.Created)

		for _, p := range []webhooks.RecoverParams{
			{FromSeq: before[1].Seq},
			{FromSeq: before[0].Seq, ToSeq: after[1].Seq},
		} {
			p.SubscriptionID = s.ID
			_, err = b.recover(p)
			require.ErrorIs(t, err, webhooks.ErrInvalid)
			require.ErrorContains(t, err, fmt.Sprintf("from_seq: %d is before the subscription's creation (its first seq is %d); set before_creation",
				p.FromSeq, after[0].Seq))
		}
		_, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, Since: s.CreatedAt.Add(-time.Hour)})
		require.ErrorContains(t, err, "since: ")
		require.ErrorContains(t, err, "is before the subscription was created")
		_, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, ToSeq: before[1].Seq})
		require.ErrorContains(t, err, "to_seq")

		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: before[0].Seq, BeforeCreation: true})
		require.NoError(t, err)
		require.Equal(t, sync.SeqRange{From: before[0].Seq, To: after[1].Seq}, res.Range)
		require.Equal(t, int64(2), res.Created, "the events before the creation get deliveries when asked")
		res, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, Until: time.Now()})
		require.NoError(t, err, "until alone: from the creation")
		require.Equal(t, after[0].Seq, res.Range.From)
	})

	t.Run("FromTheCreationWithNothingSinceIsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.emit(t, "s1", 2)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID})
		require.NoError(t, err)
		require.Zero(t, res.Range.Len())
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		evs := b.emit(t, "s1", 2)
		now := time.Now()
		for _, p := range []webhooks.RecoverParams{
			{FromSeq: 1, Since: now},
			{FromSeq: -1},
			{FromSeq: 5, ToSeq: 4},
			{Since: now, Until: now},
			{FromSeq: evs[1].Seq + 1},
		} {
			p.SubscriptionID = s.ID
			_, err := b.recover(p)
			require.ErrorIs(t, err, webhooks.ErrInvalid, "%+v", p)
		}
		_, err := b.recover(webhooks.RecoverParams{SubscriptionID: uuid.New(), FromSeq: 1})
		require.ErrorIs(t, err, webhooks.ErrNotFound)

		require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
		_, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: 1})
		require.ErrorIs(t, err, webhooks.ErrForbidden, "the owner must still be allowed to receive the space's events")
		require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))

		_, err = b.db.Pool.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq + $1`, webhooks.MaxRecoverSeqs)
		require.NoError(t, err)
		_, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: 1})
		require.ErrorIs(t, err, webhooks.ErrInvalid)
		require.ErrorContains(t, err, "at most 100000 per call")

		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
		_, err = b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: 1, ToSeq: 2})
		require.ErrorIs(t, err, webhooks.ErrConflict)
	})
}

func TestEnableFromBacklog(t *testing.T) {
	t.Parallel()

	// missedWhileDisabled builds a disabled subscription on item.* that
	// has two pending deliveries and missed events: one committed before
	// the disable but read by the round after it, one read by a round while
	// disabled, and one committed after the last round. Events of another
	// type and space are in between.
	type fixture struct {
		b                   *bundle
		rv                  *receiver
		sub                 *webhooks.Subscription
		pending, missed, no []sync.Event
	}
	missedWhileDisabled := func(t *testing.T) *fixture {
		b := setup(t, nil)
		f := &fixture{b: b, rv: newReceiver(t, nil)}
		var secret string
		f.sub, secret = b.subscribe(t, &webhooks.CreateParams{URL: f.rv.url(), EventTypes: []string{"item.*"}})
		f.rv.setSecret(t, secret)
		f.pending = b.emit(t, "s1", 2)
		b.round(t) // River is not started: pending
		readLate := b.write(t, "s1", "item.created")[0]
		require.NoError(t, webhooks.Disable(context.Background(), b.db.Pool, f.sub.ID, ""))
		f.no = append(b.write(t, "s1", "note.deleted"), b.write(t, "s2", "item.created")...)
		readDisabled := b.write(t, "s1", "item.updated")[0]
		b.round(t)
		notRead := b.write(t, "s1", "item.created")[0]
		f.missed = []sync.Event{readLate, readDisabled, notRead}
		return f
	}

	t.Run("DeliversWhatWasMissedInOrder", func(t *testing.T) {
		t.Parallel()
		f := missedWhileDisabled(t)
		b := f.b
		res := b.enableFromBacklog(t, f.sub.ID)
		require.Equal(t, webhooks.CauseManual, res.WasCause)
		require.Equal(t, int64(3), res.Created)
		require.Zero(t, res.Skipped)
		require.Zero(t, res.NotDeliveredTo, "nothing was lost")
		require.Equal(t, f.missed[2].Seq, res.ResumeAfterSeq)
		require.Equal(t, webhooks.StatusActive, b.sub(t, f.sub.ID).Status)

		b.start(t)
		b.round(t) // reads the last event again: no second delivery
		want := append(seqs(f.pending...), seqs(f.missed...)...)
		b.waitDelivered(t, f.sub.ID, want...)
		require.Equal(t, want, seqsOf(f.rv.requests()), "pending ones, then the missed ones, in seq order, each once")
		for _, r := range f.rv.requests() {
			require.NoError(t, r.SigErr)
		}
		later := b.emit(t, "s1", 1)
		b.round(t)
		b.waitDelivered(t, f.sub.ID, later[0].Seq)
	})

	// Enabled before any round read what came while it was disabled: the
	// backlog is every event after the consumer's cursor. (It was empty,
	// and the subscription resumed after the head: the events were lost.)
	t.Run("NoRoundSinceTheDisable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, nil)
		sub, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), EventTypes: []string{"item.*"}})
		rv.setSecret(t, secret)
		before := b.emit(t, "s1", 1)
		b.round(t)
		require.NoError(t, webhooks.Disable(context.Background(), b.db.Pool, sub.ID, ""))
		b.write(t, "s1", "note.deleted")
		missed := append(b.write(t, "s1", "item.created"), b.write(t, "s1", "item.updated")...)
		res := b.enableFromBacklog(t, sub.ID)
		require.Equal(t, int64(2), res.Created)
		require.Equal(t, missed[1].Seq, res.ResumeAfterSeq)

		b.start(t)
		b.round(t) // reads the missed events: no second delivery
		want := append(seqs(before...), seqs(missed...)...)
		b.waitDelivered(t, sub.ID, want...)
		require.Equal(t, want, seqsOf(rv.requests()))
	})

	// The default, from the head, is as before: pending deliveries are
	// skipped and what came while disabled is never sent.
	t.Run("FromHeadSkipsAsBefore", func(t *testing.T) {
		t.Parallel()
		f := missedWhileDisabled(t)
		b := f.b
		res, err := webhooks.Enable(context.Background(), b.db.Pool, postgres.CursorStore{}, f.sub.ID)
		require.NoError(t, err)
		require.Equal(t, int64(2), res.Skipped)
		require.Equal(t, f.missed[2].Seq, res.ResumeAfterSeq)
		require.Equal(t, f.sub.ResumeAfterSeq+1, res.NotDeliveredFrom)
		require.Equal(t, f.missed[2].Seq, res.NotDeliveredTo)
		b.start(t)
		later := b.emit(t, "s1", 1)
		b.round(t)
		b.waitDelivered(t, f.sub.ID, later[0].Seq)
		require.Equal(t, seqs(later...), seqsOf(f.rv.requests()))
		for _, e := range f.pending {
			require.Equal(t, webhooks.DeliverySkipped, b.deliveryStatus(t, f.sub.ID, e.Seq))
		}

		// The backlog of a later disable starts where rounds passed it
		// disabled, not at an earlier disable: an event read while it was
		// active and did not match the filter then is not sent, although
		// the filter changed to match it while disabled.
		activeNoMatch := b.write(t, "s1", "note.deleted")[0]
		b.round(t)
		require.NoError(t, webhooks.Disable(context.Background(), b.db.Pool, f.sub.ID, ""))
		all := []string{"*"}
		_, err = webhooks.Update(context.Background(), b.db.Pool, f.sub.ID, &webhooks.UpdateParams{EventTypes: &all})
		require.NoError(t, err)
		missed := b.write(t, "s1", "note.deleted")[0]
		b.round(t)
		res = b.enableFromBacklog(t, f.sub.ID)
		require.Equal(t, int64(1), res.Created)
		b.waitDelivered(t, f.sub.ID, missed.Seq)
		require.Equal(t, []int64{later[0].Seq, missed.Seq}, seqsOf(f.rv.requests()), "not %d", activeNoMatch.Seq)
	})

	// An event committed after the backlog's batches were read, and read
	// by a round while the subscription is still disabled, is read again
	// under the round barrier by the enabling transaction.
	t.Run("EventsCommittedWhileItEnablesAreNotMissed", func(t *testing.T) {
		t.Parallel()
		f := missedWhileDisabled(t)
		b := f.b
		var late []sync.Event
		barrier := barrierFunc(func(ctx context.Context, tx pgx.Tx, consumer string) (int64, error) {
			if late == nil {
				late = b.emit(t, "s1", 1)
				b.round(t)
			}
			return postgres.CursorStore{}.WaitForRound(ctx, tx, consumer)
		})
		res, err := webhooks.EnableFromBacklog(context.Background(), b.db.Pool, barrier,
			&webhooks.EnableBacklogParams{ID: f.sub.ID, Events: b.log, Jobs: b.river})
		require.NoError(t, err)
		require.Equal(t, int64(4), res.Created)
		b.start(t)
		want := append(append(seqs(f.pending...), seqs(f.missed...)...), late[0].Seq)
		b.waitDelivered(t, f.sub.ID, want...)
		require.Equal(t, want, seqsOf(f.rv.requests()))
	})

	// Rounds lag behind commits: a round can pass events committed before
	// the subscription was created while it is already disabled. Those are
	// not its backlog.
	t.Run("StartsNoEarlierThanTheSubscription", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, nil)
		before := b.emit(t, "s1", 2)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		require.Equal(t, before[1].Seq, s.ResumeAfterSeq)
		require.NoError(t, webhooks.Disable(context.Background(), b.db.Pool, s.ID, ""))
		missed := b.emit(t, "s1", 1)
		b.round(t) // reads before and missed, the subscription disabled
		res := b.enableFromBacklog(t, s.ID)
		require.Equal(t, int64(1), res.Created)
		b.start(t)
		b.waitDelivered(t, s.ID, missed[0].Seq)
		require.Equal(t, seqs(missed...), seqsOf(rv.requests()))
	})

	// Pending deliveries whose events retention removed are skipped, not
	// left for the sender to stop at, and the removed range is reported.
	t.Run("SkipsAndReportsWhatRetentionRemoved", func(t *testing.T) {
		t.Parallel()
		f := missedWhileDisabled(t)
		b := f.b
		b.dropBefore(t, f.pending[1].Seq)
		res := b.enableFromBacklog(t, f.sub.ID)
		b.start(t)
		want := append(seqs(f.pending[1]), seqs(f.missed...)...)
		b.waitDelivered(t, f.sub.ID, want...)
		require.Equal(t, want, seqsOf(f.rv.requests()))
		require.Equal(t, webhooks.StatusActive, b.sub(t, f.sub.ID).Status, "no gap at the head")
		require.Equal(t, webhooks.DeliverySkipped, b.deliveryStatus(t, f.sub.ID, f.pending[0].Seq))
		require.Equal(t, int64(1), res.Skipped)
		require.Equal(t, f.sub.LastDeliveredSeq+1, res.NotDeliveredFrom)
		require.Equal(t, f.pending[0].Seq, res.NotDeliveredTo)
		require.Equal(t, int64(3), res.Created)
	})

	// The deliveries that disabled an ordered subscription (its head's
	// budget spent, or a 410) are sent again first: enabled with its
	// backlog it resumes without a hole in the order.
	for name, failure := range map[string]int{"Failing": http.StatusServiceUnavailable, "Gone": http.StatusGone} {
		t.Run("IncludesTheDeliveryThatDisabledIt"+name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, slowDefaults())
			var healthy atomic.Bool
			rv := newReceiver(t, func(request, int) (int, map[string]string) {
				if healthy.Load() {
					return http.StatusOK, nil
				}
				return failure, nil
			})
			s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: quickSchedule(&webhooks.PolicyParams{}, time.Second)})
			evs := b.emit(t, "s1", 2)
			b.start(t)
			b.round(t)
			testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusDisabled }, "disabled")
			testwait.Until(t, 20*time.Second, func() bool { return b.liveJobs(t, s.ID) == 0 }, "no delivery job left")
			require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[0].Seq))
			healthy.Store(true)

			res := b.enableFromBacklog(t, s.ID)
			require.Equal(t, int64(1), res.Reset)
			b.waitDelivered(t, s.ID, seqs(evs...)...)
			require.Equal(t, seqs(evs...), okSeqs(rv.requests()), "the head that disabled it, then the next, in order")
		})
	}

	t.Run("AnActiveSubscriptionIsLeftAsItIs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		res := b.enableFromBacklog(t, s.ID)
		require.Equal(t, &webhooks.EnableResult{}, res)
		_, err := webhooks.EnableFromBacklog(context.Background(), b.db.Pool, postgres.CursorStore{},
			&webhooks.EnableBacklogParams{ID: uuid.New(), Events: b.log, Jobs: b.river})
		require.ErrorIs(t, err, webhooks.ErrNotFound)
	})
}
