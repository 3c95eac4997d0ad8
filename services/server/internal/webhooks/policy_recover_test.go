package webhooks_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// liveJobs counts the delivery jobs of subscription id that may still
// run: once it is 0, nothing more is sent for it until something inserts
// a job.
func (b *bundle) liveJobs(t testing.TB, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'subscription_id' = $2
  AND state IN ('available', 'pending', 'scheduled', 'running', 'retryable')`, webhooks.KindDeliver, id.String()).Scan(&n))
	return n
}

// TestPolicy_DeadLetterIsListedAndRecoverable: under ordered_dead_letter
// the deliveries that spent their budget are dead and listed as dead
// while the later ones go on; once the receiver answers again, a resend
// and a recover by seq range send them with their own webhook-id and a
// signature the receiver verifies.
func TestPolicy_DeadLetterIsListedAndRecoverable(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	ctx := context.Background()
	var bad [2]atomic.Int64
	var healed atomic.Bool
	rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
		if !healed.Load() && (r.Seq == bad[0].Load() || r.Seq == bad[1].Load()) {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyOrderedDeadLetter)}, time.Second)})
	rv.setSecret(t, secret)
	evs := b.emit(t, "s1", 5)
	bad[0].Store(evs[1].Seq)
	bad[1].Store(evs[3].Seq)
	b.start(t)
	b.round(t)

	testwait.Until(t, 30*time.Second, func() bool { return b.sub(t, s.ID).LastDeliveredSeq == evs[4].Seq }, "the others are delivered")
	dead, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Status: webhooks.DeliveryDead})
	require.NoError(t, err)
	require.Equal(t, []int64{evs[3].Seq, evs[1].Seq}, []int64{dead[0].Seq, dead[1].Seq}, "both dead letters listed, newest first")
	require.Len(t, dead, 2)
	for _, d := range dead {
		require.Contains(t, d.LastError, "retry budget")
	}

	healed.Store(true)
	d, err := b.resend(s.ID, evs[1].Seq)
	require.NoError(t, err)
	require.Equal(t, webhooks.DeliveryPending, d.Status)
	b.waitDelivered(t, s.ID, evs[1].Seq)
	res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: evs[0].Seq, ToSeq: evs[4].Seq})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Reset, "the other dead letter; the delivered ones stay")
	require.Zero(t, res.Created)
	b.waitDelivered(t, s.ID, evs[3].Seq)

	require.Equal(t, seqs(evs[0], evs[2], evs[4], evs[1], evs[3]), okSeqs(rv.requests()), "each once, the dead letters when recovered")
	for _, r := range rv.requests() {
		require.NoError(t, r.SigErr, "seq %d", r.Seq)
		i := map[int64]int{evs[0].Seq: 0, evs[1].Seq: 1, evs[2].Seq: 2, evs[3].Seq: 3, evs[4].Seq: 4}[r.Seq]
		require.Equal(t, evs[i].ID.String(), r.ID, "every attempt of seq %d carries its event's webhook-id", r.Seq)
	}
	dead, err = webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Status: webhooks.DeliveryDead})
	require.NoError(t, err)
	require.Empty(t, dead)
	require.Equal(t, webhooks.StatusActive, b.sub(t, s.ID).Status)
}

// TestPolicy_RetryAfterWithinTheSubscriptionsSchedule: a Retry-After
// answer delays the retry by what it asks, up to the subscription's own
// retry_max, under each policy; the server's schedule (an hour here)
// plays no part.
func TestPolicy_RetryAfterWithinTheSubscriptionsSchedule(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{webhooks.PolicyOrdered, webhooks.PolicyUnordered} {
		for _, tc := range []struct {
			name           string
			retryAfter     string
			retryMax       time.Duration
			minGap, maxGap time.Duration
		}{
			// Without Retry-After the retry would come after 50-100ms.
			{"Honoured", "1", 3 * time.Second, 900 * time.Millisecond, 3 * time.Second},
			// Without the cap the retry would come after an hour.
			{"CappedByRetryMax", "3600", 200 * time.Millisecond, 0, 3 * time.Second},
		} {
			t.Run(policy+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t, slowDefaults())
				rv := newReceiver(t, func(_ request, n int) (int, map[string]string) {
					if n == 1 {
						return http.StatusTooManyRequests, map[string]string{"Retry-After": tc.retryAfter}
					}
					return http.StatusOK, nil
				})
				s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: &webhooks.PolicyParams{Name: new(policy),
					RetryBase: new(100 * time.Millisecond), RetryMax: new(tc.retryMax), RetryBudget: new(time.Hour)}})
				evs := b.emit(t, "s1", 1)
				b.start(t)
				b.round(t)
				b.waitDelivered(t, s.ID, evs[0].Seq)
				reqs := rv.requests()
				require.Len(t, reqs, 2)
				gap := reqs[1].At.Sub(reqs[0].At)
				require.GreaterOrEqual(t, gap, tc.minGap, "Retry-After: %s", tc.retryAfter)
				require.Less(t, gap, tc.maxGap, "Retry-After: %s, retry_max %s", tc.retryAfter, tc.retryMax)
			})
		}
	}
}

// TestPolicy_AutoRecoverOff: without auto_recover a subscription disabled
// as failing is not probed, whatever the receiver does next; turning
// auto_recover off while probing stops the probes.
func TestPolicy_AutoRecoverOff(t *testing.T) {
	t.Parallel()

	t.Run("DisabledForFailingStaysDisabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slowDefaults())
		var healthy atomic.Bool
		rv := newReceiver(t, func(request, int) (int, map[string]string) {
			if healthy.Load() {
				return http.StatusOK, nil
			}
			return http.StatusServiceUnavailable, nil
		})
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: quickSchedule(&webhooks.PolicyParams{}, time.Second)})
		require.False(t, s.Policy.AutoRecover, "off by default")
		evs := b.emit(t, "s1", 2)
		b.start(t)
		b.round(t)
		testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusDisabled }, "disabled as failing")
		sent := rv.count()
		healthy.Store(true)
		testwait.Until(t, 20*time.Second, func() bool { return b.liveJobs(t, s.ID) == 0 }, "no delivery job left")

		got := b.sub(t, s.ID)
		require.Equal(t, webhooks.StatusDisabled, got.Status)
		require.Equal(t, webhooks.CauseFailing, got.DisabledCause)
		require.False(t, got.Probing)
		require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[0].Seq))
		require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[1].Seq))
		require.Equal(t, sent, rv.count(), "no probe after the disable")
	})

	t.Run("TurningItOffStopsTheProbes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slowDefaults())
		rv := newReceiver(t, func(request, int) (int, map[string]string) { return http.StatusServiceUnavailable, nil })
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
			Policy: quickSchedule(&webhooks.PolicyParams{AutoRecover: new(true)}, time.Second)})
		evs := b.emit(t, "s1", 1)
		b.start(t)
		b.round(t)
		testwait.Until(t, 20*time.Second, func() bool { return b.sub(t, s.ID).Probing }, "probing")
		probes := rv.count()
		testwait.Until(t, 20*time.Second, func() bool { return rv.count() > probes }, "probed")

		got, err := webhooks.Update(context.Background(), b.db.Pool, s.ID, &webhooks.UpdateParams{
			Policy: &webhooks.PolicyParams{AutoRecover: new(false)}})
		require.NoError(t, err)
		require.False(t, got.Probing)
		sent := rv.count()
		testwait.Until(t, 20*time.Second, func() bool { return b.liveJobs(t, s.ID) == 0 }, "no delivery job left")
		require.LessOrEqual(t, rv.count(), sent+1, "at most the probe that was in flight")
		got = b.sub(t, s.ID)
		require.Equal(t, webhooks.StatusDisabled, got.Status)
		require.False(t, got.Probing)
		require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[0].Seq), "kept for an enable from the backlog")
	})
}

// TestUnordered_ResendRecoverAndEnableFromBacklog: an unordered
// subscription's sender picks up what resend, recover and an enable from
// the backlog make pending: a resent delivery, a dead one recovered by
// seq range and the events committed while it was disabled are each sent
// once more, verified, with their events' webhook-ids.
func TestUnordered_ResendRecoverAndEnableFromBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, slowDefaults())
	ctx := context.Background()
	var bad atomic.Int64
	var healed atomic.Bool
	rv := newReceiver(t, func(r request, _ int) (int, map[string]string) {
		if !healed.Load() && r.Seq == bad.Load() {
			return http.StatusInternalServerError, nil
		}
		return http.StatusOK, nil
	})
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(),
		Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(4)}, time.Second)})
	rv.setSecret(t, secret)
	evs := b.emit(t, "s1", 6)
	bad.Store(evs[2].Seq)
	b.start(t)
	b.round(t)
	testwait.Until(t, 20*time.Second, func() bool { return b.deliveryStatus(t, s.ID, evs[2].Seq) == webhooks.DeliveryDead }, "dead after its budget")
	b.waitDelivered(t, s.ID, seqs(append(evs[:2:2], evs[3:]...)...)...)
	healed.Store(true)

	// Each step starts once the sender is idle: its own job must send.
	idle := func() {
		testwait.Until(t, 20*time.Second, func() bool { return b.liveJobs(t, s.ID) == 0 }, "no delivery job left")
	}
	idle()
	_, err := b.resend(s.ID, evs[0].Seq)
	require.NoError(t, err)
	testwait.Until(t, 10*time.Second, func() bool { return len(okSeqs(rv.requests())) == len(evs) }, "the resent delivery is sent")
	idle()
	res, err := b.recover(webhooks.RecoverParams{SubscriptionID: s.ID, FromSeq: evs[0].Seq, ToSeq: evs[5].Seq})
	require.NoError(t, err)
	require.Equal(t, int64(1), res.Reset)
	b.waitDelivered(t, s.ID, evs[0].Seq, evs[2].Seq)
	idle()

	require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, ""))
	missed := b.emit(t, "s1", 3)
	b.round(t)
	require.Equal(t, int64(3), b.enableFromBacklog(t, s.ID).Created)
	b.waitDelivered(t, s.ID, seqs(missed...)...)

	want := map[int64]int{evs[0].Seq: 2}
	ids := map[int64]string{}
	for _, e := range append(evs, missed...) {
		want[e.Seq] = max(want[e.Seq], 1)
		ids[e.Seq] = e.ID.String()
	}
	got := map[int64]int{}
	for _, r := range rv.requests() {
		require.NoError(t, r.SigErr, "seq %d", r.Seq)
		require.Equal(t, ids[r.Seq], r.ID, "seq %d", r.Seq)
		if r.Status == http.StatusOK {
			got[r.Seq]++
		}
	}
	require.Equal(t, want, got, "2xx answers per seq: the resent one twice, every other once")
}
