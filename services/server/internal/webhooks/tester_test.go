package webhooks_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func TestTester_Send(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newTester := func(t *testing.T, allowPrivate bool) *webhooks.Tester {
		t.Helper()
		tt, err := webhooks.NewTester(&webhooks.TesterConfig{AllowPrivateTargets: allowPrivate, Timeout: 5 * time.Second})
		require.NoError(t, err)
		return tt
	}

	t.Run("SignedWithTheCustomHeadersAndVerifiedByTheReceiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, func(request, int) (int, map[string]string) { return http.StatusAccepted, nil })
		s, secret := b.subscribe(t, &webhooks.CreateParams{URL: rv.url(), Headers: map[string]string{"Authorization": "Bearer t-0123456789"}})
		rv.setSecret(t, secret)
		tt := newTester(t, true)

		res, err := tt.Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, res.StatusCode)
		require.Empty(t, res.Error)
		require.Positive(t, res.Latency)
		require.Equal(t, "ok", res.ResponseExcerpt)
		again, err := tt.Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err)
		require.NotEqual(t, res.MessageID, again.MessageID, "every test has its own webhook-id")

		reqs := rv.requests()
		require.Len(t, reqs, 2)
		r := reqs[0]
		require.NoError(t, r.SigErr, "the receiver verifies the signature with the Standard Webhooks library")
		require.Equal(t, res.MessageID.String(), r.Header.Get("webhook-id"))
		require.Equal(t, "Bearer t-0123456789", r.Header.Get("Authorization"))
		var env map[string]any
		require.NoError(t, json.Unmarshal(r.Body, &env))
		require.Equal(t, webhooks.TypeTest, env["type"])
		require.EqualValues(t, 0, env["seq"], "not an event of the log")
		require.Equal(t, "s1", env["space"])
		require.Equal(t, map[string]any{"subscription_id": s.ID.String()}, env["data"])

		var rows int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM webhook_deliveries) + (SELECT count(*) FROM webhook_attempts)
			+ (SELECT count(*) FROM event_log)`).Scan(&rows))
		require.Zero(t, rows, "nothing is recorded and nothing appended")
	})

	t.Run("HoldsNoConnectionWhileSending", func(t *testing.T) {
		t.Parallel()
		b := setupConns(t, nil, 1)
		var during error
		rv := newReceiver(t, func(request, int) (int, map[string]string) {
			// The pool's only connection must be free while the request
			// is out: a transaction held across the send would take it.
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			var one int
			during = b.db.Pool.QueryRow(qctx, `SELECT 1`).Scan(&one)
			return http.StatusNoContent, nil
		})
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		res, err := newTester(t, true).Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusNoContent, res.StatusCode)
		require.NoError(t, during, "the receiver's own query got the pool's one connection")
	})

	t.Run("SignsWithBothSecretsDuringARotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, nil)
		s, old := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		rv.setSecret(t, old)
		_, err := webhooks.RotateSecret(ctx, b.db.Pool, s.ID, time.Hour)
		require.NoError(t, err)
		_, err = newTester(t, true).Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err)
		require.NoError(t, rv.requests()[0].SigErr, "a receiver still on the old secret verifies the test")
	})

	t.Run("ReceiverFailureAndRefusedAddressAreInTheResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rv := newReceiver(t, func(request, int) (int, map[string]string) { return http.StatusInternalServerError, nil })
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: rv.url()})
		require.NoError(t, webhooks.Disable(ctx, b.db.Pool, s.ID, "a disabled subscription can be tested"))

		res, err := newTester(t, true).Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusInternalServerError, res.StatusCode)
		require.Equal(t, "receiver answered 500 Internal Server Error", res.Error)

		res, err = newTester(t, false).Send(ctx, b.db.Pool, s.ID)
		require.NoError(t, err, "the egress policy refuses loopback at connect")
		require.Zero(t, res.StatusCode)
		require.Contains(t, res.Error, "webhook target refused")
		require.NotContains(t, res.Error, rv.srv.URL, "errors name no URL")
		require.Equal(t, 1, rv.count(), "no request reached the receiver")
	})

	t.Run("UnknownSubscriptionIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := newTester(t, true).Send(ctx, b.db.Pool, uuid.New())
		require.ErrorIs(t, err, webhooks.ErrNotFound)
	})
}
