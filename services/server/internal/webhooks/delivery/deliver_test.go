package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestDelivery_InOrderSignedAndVerified(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	rv.setSecret(t, secret)
	b.start(t)
	evs := b.emit(t, "s1", 20)
	b.emit(t, "other", 5) // another space: not delivered
	b.round(t)

	testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 20 }, "20 deliveries")
	reqs := rv.requests()
	require.Len(t, reqs, 20)
	for i, r := range reqs {
		require.Equal(t, evs[i].Seq, r.Seq, "in seq order")
		require.NoError(t, r.SigErr, "independent Standard Webhooks verification")
		require.Equal(t, evs[i].ID.String(), r.ID)
		require.Equal(t, "application/json", r.Header.Get("Content-Type"))
		require.True(t, strings.HasPrefix(r.Header.Get("webhook-signature"), "v1,"))
	}
	testwait.Until(t, 5*time.Second, func() bool { return b.sub(t, s.ID).LastDeliveredSeq == evs[19].Seq }, "last_delivered_seq advances")
	b.waitCounter(t, "delivered", 20)

	t.Run("TamperedBodyFailsVerification", func(t *testing.T) {
		wh, err := standardwebhooks.NewWebhook(secret)
		require.NoError(t, err)
		require.Error(t, wh.Verify(append(reqs[0].Body, ' '), reqs[0].Header))
	})
}

func TestDelivery_OrderUnderRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var failSeq int64
	rv := newReceiver(t, func(r request, n int) (int, map[string]string) {
		if r.Seq == failSeq && n <= 3 {
			return []int{500, 503, 429}[n-1], nil
		}
		return 200, nil
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	evs := b.emit(t, "s1", 10)
	failSeq = evs[4].Seq
	b.start(t)
	b.round(t)

	testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 13 }, "13 requests")
	var want []int64
	for i, e := range evs {
		want = append(want, e.Seq)
		if i == 4 {
			want = append(want, e.Seq, e.Seq, e.Seq)
		}
	}
	require.Equal(t, want, seqsOf(rv.requests()), "seq n is retried before n+1 is sent")
	ids := map[string]int{}
	for _, r := range rv.requests() {
		ids[r.ID]++
	}
	require.Equal(t, 4, ids[evs[4].ID.String()], "webhook-id is stable across retries")

	var atts []webhooks.Attempt
	testwait.Until(t, 5*time.Second, func() bool {
		var err error
		atts, err = webhooks.Attempts(context.Background(), b.db.Pool, s.ID, failSeq)
		require.NoError(t, err)
		return len(atts) == 4
	}, "four attempts recorded")
	for i, code := range []int{500, 503, 429, 200} {
		require.NotNil(t, atts[i].StatusCode)
		require.Equal(t, code, *atts[i].StatusCode)
	}
	require.Equal(t, []string{"<nil>", "<nil>", "<nil>", "<nil>"}, messageIDs(atts),
		"a request of one event is signed under the event's id, which its attempts need not store")
	require.Contains(t, atts[0].Error, "500")
	testwait.Until(t, 5*time.Second, func() bool { return b.sub(t, s.ID).LastDeliveredSeq == evs[9].Seq }, "all delivered")
	b.waitCounter(t, "retry", 3)
}

func TestDelivery_HonoursRetryAfter(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.RetryMax = 2 * time.Second // lets Retry-After: 1 through the cap
	b := setup(t, cfg)
	rv := newReceiver(t, func(r request, n int) (int, map[string]string) {
		if n == 1 {
			return http.StatusTooManyRequests, map[string]string{"Retry-After": "1"}
		}
		return 200, nil
	})
	b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.emit(t, "s1", 1)
	b.start(t)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 2 }, "retried")
	reqs := rv.requests()
	require.GreaterOrEqual(t, reqs[1].At.Sub(reqs[0].At), 900*time.Millisecond, "waited as Retry-After asked")
}

func TestDeliveryRevokedRightIsDeadWithoutRequest(t *testing.T) {
	t.Parallel()
	b, rv, s, att := revokedBeforeSend(t, nil, 2)
	require.Nil(t, att.StatusCode, "no request was made")
	require.Equal(t, webhooks.StatusActive, b.sub(t, s.ID).Status, "the subscription stays; the right may come back")

	// The right comes back: the next event is delivered, the dead ones are not.
	require.NoError(t, authz.Grant(context.Background(), b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightWrite}))
	next := b.emit(t, "s1", 1)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "delivered after re-grant")
	require.Equal(t, next[0].Seq, rv.requests()[0].Seq)
	b.waitCounter(t, "dead", 2)
}

func TestDeliveryScopeRemovedIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, "app1", authz.KindApp))
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: "s1", Principal: "app1", Right: authz.RightRead}))
	tok, _, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "app1",
		Scopes: []string{authz.ScopeEventsRead, authz.ScopeWebhooksManage}})
	require.NoError(t, err)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{Owner: "app1", URL: rv.url(), TokenID: &tok.ID})

	evs := b.emit(t, "s1", 1)
	b.round(t)
	// The app keeps its right on the space but its token loses events:read
	// (it keeps only a scope for another space).
	require.NoError(t, authz.SetTokenScopes(ctx, b.db.Pool, tok.ID, []string{authz.ScopeWebhooksManage, "events:read@s2"}))
	b.start(t)

	testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, s.ID, evs[0].Seq) == webhooks.DeliveryDead }, "dead")
	require.Zero(t, rv.count(), "the receiver saw no request at all")
	atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, evs[0].Seq)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Contains(t, atts[0].Error, "no scope covers events:read")

	t.Run("RevokedTokenIsDeadToo", func(t *testing.T) {
		require.NoError(t, authz.SetTokenScopes(ctx, b.db.Pool, tok.ID, []string{"events:read@s1"}))
		require.NoError(t, authz.RevokeToken(ctx, b.db.Pool, tok.ID))
		evs := b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, s.ID, evs[0].Seq) == webhooks.DeliveryDead }, "dead")
		require.Zero(t, rv.count())
	})
}

func TestDelivery_GapAtHeadDisables(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	evs := b.emit(t, "s1", 3)
	b.round(t)
	ctx := context.Background()
	// Retention removes the first event after the round recorded its
	// delivery but before it was sent.
	_, err := b.db.Pool.Exec(ctx, `DELETE FROM event_log WHERE seq = $1`, evs[0].Seq)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, `UPDATE event_log_retention SET low_seq = $1`, evs[1].Seq)
	require.NoError(t, err)
	b.start(t)

	testwait.Until(t, 10*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusDisabled }, "disabled")
	got := b.sub(t, s.ID)
	require.Equal(t, webhooks.CauseGap, got.DisabledCause)
	require.Contains(t, got.DisabledDetail, "left the log")
	require.Zero(t, rv.count(), "nothing after the gap is sent out of order")
	require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[1].Seq))

	t.Run("EnableResumesAtHead", func(t *testing.T) {
		res, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
		require.NoError(t, err)
		require.Equal(t, webhooks.CauseGap, res.WasCause)
		require.Equal(t, evs[2].Seq, res.ResumeAfterSeq)
		require.Equal(t, int64(2), res.Skipped)
		next := b.emit(t, "s1", 1)
		b.round(t)
		testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "delivered after enable")
		require.Equal(t, next[0].Seq, rv.requests()[0].Seq)
	})
	b.waitCounter(t, "gap", 1)
}

func TestDelivery_GoneDisables(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, func(request, int) (int, map[string]string) { return http.StatusGone, nil })
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	evs := b.emit(t, "s1", 3)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusDisabled }, "disabled")
	require.Equal(t, webhooks.CauseGone, b.sub(t, s.ID).DisabledCause)
	require.Equal(t, 1, rv.count(), "nothing is sent after 410")
	require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[0].Seq))
	b.waitCounter(t, "gone", 1)

	// A disabled subscription gets no new deliveries.
	b.emit(t, "s1", 1)
	require.Zero(t, b.round(t).Jobs)
}

func TestDelivery_RetryBudgetExhaustedDisables(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.RetryBudget = 300 * time.Millisecond
	b := setup(t, cfg)
	rv := newReceiver(t, func(request, int) (int, map[string]string) { return 500, nil })
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	evs := b.emit(t, "s1", 2)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return b.sub(t, s.ID).Status == webhooks.StatusDisabled }, "disabled")
	got := b.sub(t, s.ID)
	require.Equal(t, webhooks.CauseFailing, got.DisabledCause)
	require.Contains(t, got.DisabledDetail, "retry budget")
	require.Equal(t, webhooks.DeliveryDead, b.deliveryStatus(t, s.ID, evs[0].Seq))
	require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[1].Seq))
	for _, r := range rv.requests() {
		require.Equal(t, evs[0].Seq, r.Seq, "seq n+1 is never sent before n succeeds")
	}
	require.GreaterOrEqual(t, rv.count(), 2, "retried within the budget")
	b.waitCounter(t, "dead", 1)
}

func TestDelivery_NoRedirectsFollowed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	target := newReceiver(t, nil)
	rv := newReceiver(t, func(request, int) (int, map[string]string) {
		return http.StatusTemporaryRedirect, map[string]string{"Location": target.url()}
	})
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	evs := b.emit(t, "s1", 1)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() >= 2 }, "retried")
	require.Zero(t, target.count(), "the redirect target saw nothing")
	atts, err := webhooks.Attempts(context.Background(), b.db.Pool, s.ID, evs[0].Seq)
	require.NoError(t, err)
	require.NotEmpty(t, atts)
	require.Equal(t, http.StatusTemporaryRedirect, *atts[0].StatusCode)
	require.Contains(t, atts[0].Error, "redirects are not followed")
	require.Equal(t, webhooks.DeliveryPending, b.deliveryStatus(t, s.ID, evs[0].Seq))
}

func TestDelivery_DialTimeCheckRefusesLoopback(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.AllowPrivateTargets = false // the subscription was accepted (say, a public name), the dial is not
	b := setup(t, cfg)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	b.start(t)
	evs := b.emit(t, "s1", 1)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool {
		atts, err := webhooks.Attempts(context.Background(), b.db.Pool, s.ID, evs[0].Seq)
		require.NoError(t, err)
		return len(atts) > 0
	}, "an attempt is recorded")
	atts, err := webhooks.Attempts(context.Background(), b.db.Pool, s.ID, evs[0].Seq)
	require.NoError(t, err)
	require.Nil(t, atts[0].StatusCode)
	require.Contains(t, atts[0].Error, "loopback")
	require.NotContains(t, atts[0].Error, "/hook", "no URL in the record")
	require.Zero(t, rv.count())
}

func TestDelivery_RotatedSecretSignsWithBoth(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, oldSecret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	newSecret, err := webhooks.RotateSecret(context.Background(), b.db.Pool, s.ID, time.Hour)
	require.NoError(t, err)
	require.NotEqual(t, oldSecret, newSecret)
	b.start(t)
	b.emit(t, "s1", 1)
	b.round(t)
	testwait.Until(t, 10*time.Second, func() bool { return rv.count() == 1 }, "delivered")
	r := rv.requests()[0]
	for _, sec := range []string{oldSecret, newSecret} {
		wh, err := standardwebhooks.NewWebhook(sec)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(r.Body, r.Header))
	}
}

func TestDelivery_ManySubscriptionsKeepOrder(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Slice = 20 * time.Millisecond // force hand-offs between jobs
	b := setup(t, cfg)
	const subs, events = 5, 40
	var rvs []*receiver
	for range subs {
		rv := newReceiver(t, func(r request, n int) (int, map[string]string) {
			if r.Seq%7 == 0 && n == 1 {
				return 500, nil
			}
			return 200, nil
		})
		rvs = append(rvs, rv)
		b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	}
	b.start(t)
	var all []int64
	for range 4 {
		for _, e := range b.emit(t, "s1", events/4) {
			all = append(all, e.Seq)
		}
		b.round(t)
	}
	for _, rv := range rvs {
		testwait.Until(t, 90*time.Second, func() bool {
			rs := rv.requests()
			return len(rs) > 0 && rs[len(rs)-1].Seq == all[len(all)-1] && rs[len(rs)-1].Status == 200
		}, "all delivered")
		var delivered []int64
		for _, r := range rv.requests() {
			if len(delivered) > 0 {
				require.GreaterOrEqual(t, r.Seq, delivered[len(delivered)-1], "never goes back")
			}
			if r.Status == 200 {
				require.NotContains(t, delivered, r.Seq, "each delivered once")
				delivered = append(delivered, r.Seq)
			}
		}
		require.Equal(t, all, delivered)
	}
}

// TestEnable_NotDeliveredStartsAfterWhatTheRecorderRecorded: a process's
// recorder marks answered deliveries delivered without moving the
// subscription's last_delivered_seq, which the sender's next step does.
// Reading the subscription, or enabling it from the head, before that
// step ran must not name those seqs as never delivered.
func TestEnable_NotDeliveredStartsAfterWhatTheRecorderRecorded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:1/hook"})
	evs := b.emit(t, "s1", 3)
	b.round(t)
	ctx := context.Background()
	// What a flush of the recorder leaves: two deliveries delivered, the
	// subscription's last_delivered_seq where it was.
	_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET status = 'delivered', finished_at = now()
WHERE subscription_id = $1 AND event_seq = ANY($2)`, s.ID, []int64{evs[0].Seq, evs[1].Seq})
	require.NoError(t, err)
	require.Equal(t, evs[1].Seq, b.sub(t, s.ID).LastDeliveredSeq, "the subscription reports what was delivered")
	require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, "test"))

	res, err := webhooks.Enable(ctx, b.db.Pool, postgres.CursorStore{}, s.ID)
	require.NoError(t, err)
	require.Equal(t, evs[2].Seq, res.NotDeliveredFrom, "seqs %d and %d were delivered", evs[0].Seq, evs[1].Seq)
	require.Equal(t, evs[2].Seq, res.NotDeliveredTo)
}
