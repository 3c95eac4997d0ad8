package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// idsReceiver answers every request 204 and keeps the webhook-ids it got.
type idsReceiver struct {
	srv *httptest.Server
	mu  gosync.Mutex
	ids []string
}

func newIDsReceiver(t *testing.T) *idsReceiver {
	rv := &idsReceiver{}
	rv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rv.mu.Lock()
		rv.ids = append(rv.ids, r.Header.Get("webhook-id"))
		rv.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rv.srv.Close)
	return rv
}

func (rv *idsReceiver) received() []string {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return append([]string(nil), rv.ids...)
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
		map[string]any{"space": "acme", "url": rv.srv.URL, "max_batch": 10}, &sub))
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
