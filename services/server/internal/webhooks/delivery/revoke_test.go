package delivery_test

import (
	"context"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// TestDeliveryRevokedWhileSendingStopsTheNextSend: a right revoked while a
// sender's request is out stops the next send of the same batch once the
// decision it went out under is older than webhooks.rights_max_age: rights
// are decided again before a request starts with an older decision.
func TestDeliveryRevokedWhileSendingStopsTheNextSend(t *testing.T) {
	t.Parallel()
	cfg := fastRetries()
	cfg.Timeout = 10 * time.Second // the first request waits while the right is revoked
	cfg.RightsMaxAge = 50 * time.Millisecond
	b := setup(t, cfg)
	arrived, release := make(chan struct{}), make(chan struct{})
	held := false // the receiver calls respond under its lock, one at a time
	rv := newReceiver(t, func(request, int) (int, map[string]string) {
		if !held {
			held = true
			close(arrived)
			<-release
		}
		return http.StatusOK, nil
	})
	unblock := gosync.OnceFunc(func() { close(release) })
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
	evs := b.emit(t, "s1", 2)
	b.round(t)
	b.start(t)
	t.Cleanup(unblock) // before the workers stop and the receiver closes, which wait for the request

	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never arrived")
	}
	ctx := context.Background()
	require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
	revoked := time.Now()
	testwait.Until(t, time.Second, func() bool { return time.Since(revoked) > cfg.RightsMaxAge }, "the bound has passed")
	unblock()

	testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, s.ID, evs[1].Seq) == webhooks.DeliveryDead }, "second dead")
	require.Equal(t, []int64{evs[0].Seq}, seqsOf(rv.requests()), "no request after the revocation")
	atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, evs[1].Seq)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Contains(t, atts[0].Error, "not allowed")
	require.Equal(t, []string{""}, messageIDs(atts), "no request, so no webhook-id")
}

// TestUnordered_RevokedRightIsDeadWithoutRequest: an unordered
// subscription's pump checks rights before every send too; a delivery of
// a revoked right is dead without a request.
func TestUnordered_RevokedRightIsDeadWithoutRequest(t *testing.T) {
	t.Parallel()
	revokedBeforeSend(t, &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(4)}, 3)
}

// revokedBeforeSend: n events of a subscription with policy (nil: the
// default, ordered) have their deliveries and jobs when the owner's right
// is revoked and the workers start; every delivery must end dead without a
// request, the first with one attempt that says the send was not allowed.
// It returns the bundle, the receiver, the subscription and that attempt.
func revokedBeforeSend(t *testing.T, policy *webhooks.PolicyParams, n int) (*bundle, *receiver, *webhooks.Subscription, webhooks.Attempt) {
	t.Helper()
	b := setup(t, nil)
	rv := newReceiver(t, nil)
	s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Policy: policy})
	evs := b.emit(t, "s1", n)
	b.round(t) // deliveries and jobs exist; the owner still has read
	ctx := context.Background()
	require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
	b.start(t)

	for _, e := range evs {
		testwait.Until(t, 10*time.Second, func() bool { return b.deliveryStatus(t, s.ID, e.Seq) == webhooks.DeliveryDead }, "dead")
	}
	require.Zero(t, rv.count(), "the receiver saw no request")
	atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, evs[0].Seq)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Contains(t, atts[0].Error, "not allowed")
	return b, rv, s, atts[0]
}
