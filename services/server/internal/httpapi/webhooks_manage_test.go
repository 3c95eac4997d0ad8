package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// headerReceiver records every request, verified or not, with its
// headers, and answers 204 unless its rule is changed.
type headerReceiver struct{ *receiver }

func newHeaderReceiver(t *testing.T) *headerReceiver {
	t.Helper()
	rv := &headerReceiver{newReceiver(t)}
	rv.SetRule(webhookstest.Status(http.StatusNoContent))
	return rv
}

// waitFor waits until n requests arrived and returns them.
func (rv *headerReceiver) waitFor(t *testing.T, n int) []webhookstest.Arrival {
	t.Helper()
	testwait.Until(t, 20*time.Second, func() bool { return rv.Count() >= n }, "%d requests", n)
	return rv.Arrivals()
}

func TestAPI_WebhookHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightWrite, "s1", allScopes...)
	rv := newHeaderReceiver(t)
	const token = "Bearer receiver-secret-0123456789"

	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"headers":{"authorization":%q,"X-Tenant":"acme-tenant-1"}}`,
		rv.url(), token))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), "receiver-secret", "not even the answer to create shows a value whole")
	sub := r.json(t)
	require.Equal(t, map[string]any{"Authorization": webhooks.MaskedValue, "X-Tenant": webhooks.MaskedValue}, sub["headers"])
	rv.setSecret(t, sub["secret"].(string))
	sp := "/v1/webhooks/" + sub["id"].(string)

	t.Run("GetAndListMaskTheValues", func(t *testing.T) {
		r := b.do(t, "GET", sp, owner, "")
		require.Equal(t, http.StatusOK, r.status)
		require.NotContains(t, string(r.body), "receiver-secret")
		require.Equal(t, map[string]any{"Authorization": webhooks.MaskedValue, "X-Tenant": webhooks.MaskedValue}, r.json(t)["headers"])
		r = b.do(t, "GET", "/v1/webhooks", owner, "")
		require.NotContains(t, string(r.body), "receiver-secret")
	})

	t.Run("ArriveWithEveryDelivery", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.created"},{"type":"item.updated"}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		for _, got := range rv.waitFor(t, 2) {
			require.Equal(t, token, got.Header.Get("Authorization"))
			require.Equal(t, "acme-tenant-1", got.Header.Get("X-Tenant"))
			require.NoError(t, got.SigErr)
		}
	})

	t.Run("RefusedNamesAre422NamingTheHeader", func(t *testing.T) {
		url := fmt.Sprintf("%q", rv.srv.Base())
		for name, want := range map[string]string{
			"webhook-signature": "headers.Webhook-Signature", "webhook-id": "headers.Webhook-Id", "Webhook-Timestamp": "headers.Webhook-Timestamp",
			"Connection": "headers.Connection", "keep-alive": "headers.Keep-Alive", "Proxy-Authorization": "headers.Proxy-Authorization",
			"TE": "headers.Te", "Trailer": "headers.Trailer", "transfer-encoding": "headers.Transfer-Encoding", "Upgrade": "headers.Upgrade",
			"Host": "headers.Host", "Content-Length": "headers.Content-Length", "content-type": "headers.Content-Type",
		} {
			d := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"headers":{"`+name+`":"x1"}}`).problem(t, http.StatusUnprocessableEntity)
			require.Contains(t, d, want, name)
			d = b.do(t, "PATCH", sp, owner, `{"headers":{"`+name+`":"x1"}}`).problem(t, http.StatusUnprocessableEntity)
			require.Contains(t, d, want, name)
		}
		d := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"headers":{"X-A":"a\r\nX-B: 1"}}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, "headers.X-A")
		d = b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"headers":{"X-A":7}}`).problem(t, http.StatusBadRequest)
		require.Contains(t, d, `"headers"`)
	})

	t.Run("PatchMergesAndNullRemoves", func(t *testing.T) {
		r := b.do(t, "PATCH", sp, owner, `{"headers":{"X-Tenant":null,"X-Region":"eu-west-1"}}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, map[string]any{"Authorization": webhooks.MaskedValue, "X-Region": webhooks.MaskedValue}, r.json(t)["headers"])
		n := len(rv.Arrivals())
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.created"}]}`).status)
		got := rv.waitFor(t, n+1)[n]
		require.Equal(t, token, got.Header.Get("Authorization"), "a header the patch does not name stays")
		require.Equal(t, "eu-west-1", got.Header.Get("X-Region"))
		require.Empty(t, got.Header.Values("X-Tenant"))
	})

	t.Run("AnotherPrincipalCannotReadOrChangeThem", func(t *testing.T) {
		r := b.do(t, "GET", sp, stranger, "")
		r.problem(t, http.StatusNotFound)
		require.NotContains(t, string(r.body), webhooks.MaskedValue)
		b.do(t, "PATCH", sp, stranger, `{"headers":{"Authorization":"Bearer mine"}}`).problem(t, http.StatusNotFound)
		r = b.do(t, "GET", "/v1/webhooks?space=s1", stranger, "")
		require.Equal(t, http.StatusOK, r.status)
		require.NotContains(t, string(r.body), sub["id"].(string))
	})
}

func TestAPI_WebhookDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightWrite, "s1", allScopes...)
	outsider := b.principal(t, "outsider", "", "", allScopes...)
	rv := newHeaderReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	id := sub["id"].(string)
	sp := "/v1/webhooks/" + id
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.created"}]}`).status)
	rv.waitFor(t, 1)
	require.Eventually(t, func() bool {
		return len(b.do(t, "GET", sp+"/deliveries?status=delivered", owner, "").json(t)["deliveries"].([]any)) == 1
	}, 10*time.Second, 20*time.Millisecond)

	t.Run("AnotherPrincipalCannotDeleteIt", func(t *testing.T) {
		b.do(t, "DELETE", sp, stranger, "").problem(t, http.StatusNotFound)
		b.do(t, "DELETE", sp, outsider, "").problem(t, http.StatusNotFound)
		b.do(t, "DELETE", sp, "", "").problem(t, http.StatusUnauthorized)
		require.Equal(t, http.StatusOK, b.do(t, "GET", sp, owner, "").status, "still there")
	})

	t.Run("OwnerDeletesItWithItsRecords", func(t *testing.T) {
		r := b.do(t, "DELETE", sp, owner, "")
		require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
		require.Empty(t, r.body)
		b.do(t, "GET", sp, owner, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", sp+"/deliveries", owner, "").problem(t, http.StatusNotFound)
		b.do(t, "DELETE", sp, owner, "").problem(t, http.StatusNotFound)
		var rows int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1)
			+ (SELECT count(*) FROM webhook_attempts WHERE subscription_id = $1)`, id).Scan(&rows))
		require.Zero(t, rows)
		require.Empty(t, b.do(t, "GET", "/v1/webhooks", owner, "").json(t)["subscriptions"])
	})
}

func TestAPI_WebhookTest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	admin := b.principal(t, "boss", authz.RightAdmin, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightWrite, "s1", allScopes...)
	rv := newHeaderReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"headers":{"X-Receiver-Key":"k-0123456789"}}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	sp := "/v1/webhooks/" + sub["id"].(string)

	t.Run("ReturnsTheReceiversStatusAndLatencyAndTheReceiverVerifiesIt", func(t *testing.T) {
		r := b.do(t, "POST", sp+"/test", owner, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		res := r.json(t)
		require.EqualValues(t, http.StatusNoContent, res["status_code"])
		require.Equal(t, true, res["ok"])
		require.Greater(t, res["latency_seconds"].(float64), 0.0)
		got := rv.waitFor(t, 1)[0]
		require.NoError(t, got.SigErr)
		require.Equal(t, res["message_id"], got.Header.Get("webhook-id"))
		require.Equal(t, "k-0123456789", got.Header.Get("X-Receiver-Key"))
		require.Contains(t, string(got.Body), `"type":"bothy.webhook.test"`)
		require.Equal(t, http.StatusOK, b.do(t, "POST", sp+"/test", admin, `{}`).status, "an admin of the space may test it")
	})

	t.Run("AFailingReceiverIsA200SayingWhy", func(t *testing.T) {
		rv.SetRule(webhookstest.Status(http.StatusServiceUnavailable))
		defer rv.SetRule(webhookstest.Status(http.StatusNoContent))
		res := b.do(t, "POST", sp+"/test", owner, "").json(t)
		require.EqualValues(t, http.StatusServiceUnavailable, res["status_code"])
		require.Equal(t, false, res["ok"])
		require.Equal(t, "receiver answered 503 Service Unavailable", res["error"])
	})

	t.Run("AnotherPrincipalCannotTestIt", func(t *testing.T) {
		n := len(rv.Arrivals())
		b.do(t, "POST", sp+"/test", stranger, "").problem(t, http.StatusNotFound)
		b.do(t, "POST", sp+"/test", "", "").problem(t, http.StatusUnauthorized)
		b.do(t, "POST", sp+"/test", owner, `{"x":1}`).problem(t, http.StatusBadRequest)
		b.do(t, "POST", "/v1/webhooks/0199c0de-0000-7000-8000-000000000000/test", owner, "").problem(t, http.StatusNotFound)
		require.Len(t, rv.Arrivals(), n, "no request was sent for them")
	})
}

// TestAPI_OperationalEvents runs the server as "bothy server" builds it: a
// receiver answers 410, its subscription is disabled, and another
// subscription on the space receives bothy.webhook.disabled about it,
// appended to the log through the webhooks module's notice worker.
// Clients cannot append such events themselves.
func TestAPI_OperationalEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	gone := newHeaderReceiver(t)
	gone.SetRule(webhookstest.Status(http.StatusGone))
	watcher := newHeaderReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"event_types":["item.*"]}`, gone.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	goneID := r.json(t)["id"].(string)
	r = b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"event_types":["bothy.webhook.*"]}`, watcher.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	watcher.setSecret(t, r.json(t)["secret"].(string))

	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.created"}]}`).status)
	got := watcher.waitFor(t, 1)[0]
	require.NoError(t, got.SigErr)
	var env struct {
		Type  string `json:"type"`
		Space string `json:"space"`
		Actor string `json:"actor"`
		Data  struct {
			SubscriptionID string `json:"subscription_id"`
			Cause          string `json:"cause"`
			Seq            int64  `json:"seq"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got.Body, &env))
	require.Equal(t, "bothy.webhook.disabled", env.Type)
	require.Equal(t, "s1", env.Space)
	require.Equal(t, "bothy", env.Actor)
	require.Equal(t, goneID, env.Data.SubscriptionID)
	require.Equal(t, "gone", env.Data.Cause)
	require.Equal(t, "disabled", b.do(t, "GET", "/v1/webhooks/"+goneID, owner, "").json(t)["status"])

	d := b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"bothy.webhook.disabled","data":{"subscription_id":"`+goneID+`"}}]}`).
		problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, d, "events[0].type")
	require.Contains(t, d, "bothy.")
}
