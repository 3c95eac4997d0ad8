package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
)

// batchIDReceiver answers every request 204; received gives, by seq, the
// webhook-id of the last request that carried it (a batch's carries
// several).
type batchIDReceiver struct{ *receiver }

func newBatchIDReceiver(t *testing.T) *batchIDReceiver {
	t.Helper()
	rv := &batchIDReceiver{newReceiver(t)}
	rv.SetRule(webhookstest.Status(http.StatusNoContent))
	return rv
}

// received returns the webhook-ids by seq once n seqs arrived.
func (rv *batchIDReceiver) received(t *testing.T, n int) map[int64]string {
	t.Helper()
	ids := func() map[int64]string {
		out := map[int64]string{}
		for _, a := range rv.Arrivals() {
			for _, seq := range a.Seqs() {
				out[seq] = a.ID
			}
		}
		return out
	}
	testwait.Until(t, 30*time.Second, func() bool { return len(ids()) >= n }, "%d seqs", n)
	return ids()
}

// TestAPI_DeliveryDetail_ShowsTheWebhookIDSent: a delivery sent in a batch
// shows the batch's webhook-id, the one its receiver got, on its attempt
// and in its request's headers; also after the subscription stopped
// batching, when its next request would carry the event's id.
func TestAPI_DeliveryDetail_ShowsTheWebhookIDSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", authz.ScopeWebhooksManage, authz.ScopeEventsWrite, authz.ScopeEventsRead)
	rv := newBatchIDReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"max_batch":10}`, rv.srv.Base()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)["id"].(string)
	b.appendTo(t, owner, "s1", "item.created", "item.created", "item.created")
	got := rv.received(t, 3)
	require.Eventually(t, func() bool {
		var page struct {
			Deliveries []struct {
				Status string `json:"status"`
			} `json:"deliveries"`
		}
		r := b.do(t, "GET", "/v1/webhooks/"+sub+"/deliveries", owner, "")
		require.NoError(t, json.Unmarshal(r.body, &page))
		n := 0
		for _, d := range page.Deliveries {
			if d.Status == "delivered" {
				n++
			}
		}
		return n == 3
	}, 30*time.Second, 20*time.Millisecond, "the three deliveries are recorded delivered")

	check := func(t *testing.T) {
		t.Helper()
		for seq, sent := range got {
			require.True(t, strings.HasPrefix(sent, "batch_"), "seq %d went in a batch: %q", seq, sent)
			var d struct {
				AttemptList []struct {
					WebhookID string `json:"webhook_id"`
				} `json:"attempt_list"`
				Request struct {
					Headers map[string]string `json:"headers"`
				} `json:"request"`
			}
			rd := b.do(t, "GET", fmt.Sprintf("/v1/webhooks/%s/deliveries/%d", sub, seq), owner, "")
			require.Equal(t, http.StatusOK, rd.status, "%s", rd.body)
			require.NoError(t, json.Unmarshal(rd.body, &d))
			require.NotEmpty(t, d.AttemptList, "seq %d", seq)
			require.Equal(t, sent, d.AttemptList[len(d.AttemptList)-1].WebhookID, "seq %d: the attempt's webhook-id", seq)
			require.Equal(t, sent, d.Request.Headers["Webhook-Id"], "seq %d: the request's webhook-id", seq)
		}
	}
	t.Run("WhileItBatches", check)
	r = b.do(t, "PATCH", "/v1/webhooks/"+sub, owner, `{"max_batch":0}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	t.Run("AfterItStoppedBatching", check)
}
