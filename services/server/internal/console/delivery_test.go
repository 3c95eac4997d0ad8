package console_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// idsReceiver answers every request 204 and keeps the webhook-ids it got.
type idsReceiver struct {
	url string
	ep  *webhookstest.Endpoint
}

func newIDsReceiver(t *testing.T) *idsReceiver {
	url, ep := recvtest.Endpoint(t, webhookstest.Status(http.StatusNoContent))
	return &idsReceiver{url: url, ep: ep}
}

func (rv *idsReceiver) received() []string {
	var ids []string
	for _, a := range rv.ep.Arrivals() {
		ids = append(ids, a.ID)
	}
	return ids
}

var webhookIDRow = regexp.MustCompile(`data-name="Webhook-Id"><th>Webhook-Id</th><td class="wrap">([^<]*)</td>`)

// TestConsole_DeliveryShowsTheWebhookIDSent: the attempt of a delivery
// sent in a batch shows the batch's webhook-id, the one the receiver got,
// not the event's id.
func TestConsole_DeliveryShowsTheWebhookIDSent(t *testing.T) {
	t.Parallel()
	b := setup(t, "server.role", "all")
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rv := newIDsReceiver(t)
	var sub struct {
		ID string `json:"id"`
	}
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/webhooks", token,
		map[string]any{"space": "acme", "url": rv.url, "max_batch": 10}, &sub))
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/spaces/acme/events", token,
		map[string]any{"events": []map[string]any{{"type": "item.created"}, {"type": "item.created"}}}, nil))
	br := b.browser(t)
	br.signIn(token)

	var p *page
	require.Eventually(t, func() bool {
		p = br.get(fmt.Sprintf("/console/subscriptions/%s/deliveries/1", sub.ID))
		return p.status == http.StatusOK && strings.Contains(p.body, `data-testid="request-headers"`)
	}, 30*time.Second, 50*time.Millisecond, "waiting for the delivery's attempt")
	sent := rv.received()
	require.Len(t, sent, 1, "both events in one request")
	require.True(t, strings.HasPrefix(sent[0], "batch_"), sent[0])
	m := webhookIDRow.FindAllStringSubmatch(p.body, -1)
	require.Len(t, m, 1, "one attempt with its webhook-id:\n%s", p.body)
	require.Equal(t, sent[0], m[0][1])
}
