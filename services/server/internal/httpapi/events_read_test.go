package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// appendTo appends events of the given types to space and returns their
// ids in order.
func (b *testBundle) appendTo(t *testing.T, token, space string, types ...string) []string {
	t.Helper()
	var evs []string
	for _, typ := range types {
		evs = append(evs, fmt.Sprintf(`{"type":%q,"data":{"n":%d}}`, typ, len(evs)))
	}
	r := b.do(t, "POST", "/v1/spaces/"+space+"/events", token, `{"events":[`+strings.Join(evs, ",")+`]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	var ids []string
	for _, e := range eventsOf(t, r) {
		ids = append(ids, e["id"].(string))
	}
	return ids
}

// pull GETs path and returns the page's event ids and body.
func (b *testBundle) pull(t *testing.T, token, path string) ([]string, map[string]any) {
	t.Helper()
	r := b.do(t, "GET", path, token, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	body := r.json(t)
	var ids []string
	for _, e := range body["events"].([]any) {
		ids = append(ids, e.(map[string]any)["id"].(string))
	}
	return ids, body
}

func TestAPI_PullEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	reader := b.principal(t, "reader", authz.RightRead, "s1", authz.ScopeEventsRead)
	other := b.principal(t, "other", authz.RightWrite, "s2", authz.ScopeEventsWrite, authz.ScopeEventsRead)
	noScope := b.principal(t, "noscope", authz.RightAdmin, "s1", authz.ScopeWebhooksManage)
	first := b.appendTo(t, writer, "s1", "item.created", "order.placed")
	b.appendTo(t, other, "s2", "item.created")
	second := b.appendTo(t, writer, "s1", "item.updated", "item.deleted")
	all := append(append([]string{}, first...), second...)

	t.Run("ThePageIsTheSpacesEventsInSeqOrder", func(t *testing.T) {
		ids, body := b.pull(t, reader, "/v1/spaces/s1/events")
		require.Equal(t, all, ids)
		require.Equal(t, true, body["done"])
		require.NotEmpty(t, body["next_cursor"])
		ev := body["events"].([]any)[0].(map[string]any)
		require.Equal(t, "writer", ev["actor"])
		require.Equal(t, "s1", ev["space"])
	})
	t.Run("CursorsWalkEveryEventOnce", func(t *testing.T) {
		require.Equal(t, all, b.pullAll(t, reader, "/v1/spaces/s1/events?limit=3"))
	})
	t.Run("AfterASeq", func(t *testing.T) {
		_, body := b.pull(t, reader, "/v1/spaces/s1/events?limit=2")
		seq := int(body["events"].([]any)[1].(map[string]any)["seq"].(float64))
		ids, _ := b.pull(t, reader, fmt.Sprintf("/v1/spaces/s1/events?after=%d", seq))
		require.Equal(t, second, ids)
	})
	t.Run("TypePatterns", func(t *testing.T) {
		ids, _ := b.pull(t, reader, "/v1/spaces/s1/events?type=item.*")
		require.Equal(t, []string{all[0], all[2], all[3]}, ids)
		ids, _ = b.pull(t, reader, "/v1/spaces/s1/events?type="+url.QueryEscape("order.placed,item.deleted"))
		require.Equal(t, []string{all[1], all[3]}, ids)
	})
	t.Run("OneByID", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/spaces/s1/events/"+all[2], reader, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, "item.updated", r.json(t)["type"])
		b.do(t, "GET", "/v1/spaces/s1/events/0199c0de-0000-7000-8000-000000000000", reader, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", "/v1/spaces/s1/events/not-an-id", reader, "").problem(t, http.StatusNotFound)
		otherID := b.appendTo(t, other, "s2", "item.created")[0]
		b.do(t, "GET", "/v1/spaces/s1/events/"+otherID, reader, "").problem(t, http.StatusNotFound)
	})
	t.Run("NeedsReadAndEventsRead", func(t *testing.T) {
		for _, tok := range []string{noScope, other} {
			b.do(t, "GET", "/v1/spaces/s1/events", tok, "").problem(t, http.StatusForbidden)
			b.do(t, "GET", "/v1/spaces/s1/events/"+all[0], tok, "").problem(t, http.StatusForbidden)
			b.do(t, "GET", "/v1/spaces/s1/event-types", tok, "").problem(t, http.StatusForbidden)
		}
	})
	t.Run("BadParametersAre400NamingThem", func(t *testing.T) {
		for q, want := range map[string]string{
			"after=-1": "after", "after=x": "after", "after=1&cursor=abc": "after and cursor", "cursor=abc": "cursor",
			"type=Item": "type", "type=a.*.b": "type", "wait=2m": "wait", "wait=soon": "wait", "limit=0": "limit",
		} {
			require.Contains(t, b.do(t, "GET", "/v1/spaces/s1/events?"+q, reader, "").problem(t, http.StatusBadRequest), want, q)
		}
	})
	t.Run("TypesSeen", func(t *testing.T) {
		var types []any
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r := b.do(t, "GET", "/v1/spaces/s1/event-types", reader, "")
			require.Equal(c, http.StatusOK, r.status, "%s", r.body)
			types = r.json(t)["event_types"].([]any)
			require.Len(c, types, 4, "the catalog's consumer counts the four types of s1")
		}, 20*time.Second, 20*time.Millisecond)
		item := types[0].(map[string]any)
		require.Equal(t, "item.created", item["type"])
		require.EqualValues(t, 1, item["count"])
		require.Len(t, once(t, b.walk(t, "/v1/spaces/s1/event-types?limit=3", reader, "event_types", "type", func() {})), 4)
	})
}

// TestAPI_ReceiverThatWasDownPullsWhatItMissed: a webhook receiver gets
// the first events, is down while more are appended (their deliveries
// fail), and on its return pulls exactly the ones it missed with
// GET .../events?after=<the last seq it got>.
func TestAPI_ReceiverThatWasDownPullsWhatItMissed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	owner := b.principal(t, "owner", authz.RightRead, "s1", authz.ScopeWebhooksManage, authz.ScopeEventsRead)
	rv := newReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q}`, rv.srv.Base()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	rv.setSecret(t, r.json(t)["secret"].(string))

	b.appendTo(t, writer, "s1", "item.created", "item.created")
	got := rv.waitFor(t, 2)
	lastSeq := int64(got[1]["seq"].(float64))
	rv.srv.Close() // down

	missed := b.appendTo(t, writer, "s1", "item.updated", "item.created", "item.deleted")
	b.appendTo(t, b.principal(t, "else", authz.RightWrite, "s9", authz.ScopeEventsWrite), "s9", "item.created")

	// The server's own events about the failing receiver (bothy.webhook.*)
	// land in the space too; the receiver asks for its kind only.
	require.Equal(t, missed, b.pullAll(t, owner, fmt.Sprintf("/v1/spaces/s1/events?limit=2&type=item.*&after=%d", lastSeq)))
}

// pullAll follows next_cursor from path until a page is done and returns
// every event id.
func (b *testBundle) pullAll(t *testing.T, token, path string) []string {
	t.Helper()
	var out []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the pull ends")
		ids, body := b.pull(t, token, path)
		out = append(out, ids...)
		if body["done"] == true {
			return out
		}
		u, err := url.Parse(path)
		require.NoError(t, err)
		q := u.Query()
		q.Del("after")
		q.Set("cursor", body["next_cursor"].(string))
		path = u.Path + "?" + q.Encode()
	}
}

// TestAPI_DeliveryDetail: one delivery shows its event and the request it
// sends, with the custom header values masked.
func TestAPI_DeliveryDetail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	owner := b.principal(t, "owner", authz.RightRead, "s1", authz.ScopeWebhooksManage, authz.ScopeEventsRead)
	admin := b.principal(t, "admin", authz.RightAdmin, "s1", authz.ScopeWebhooksManage)
	const secretValue = "Bearer receiver-secret-0123456789"
	rv := newReceiver(t)
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"headers":{"authorization":%q}}`, rv.srv.Base(), secretValue))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	id := b.appendTo(t, writer, "s1", "item.created")[0]
	seq := int64(rv.waitFor(t, 1)[0]["seq"].(float64))
	path := fmt.Sprintf("/v1/webhooks/%s/deliveries/%d", sub["id"], seq)

	r = b.do(t, "GET", path, owner, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), "receiver-secret")
	d := r.json(t)
	require.Equal(t, id, d["event"].(map[string]any)["id"])
	req := d["request"].(map[string]any)
	require.Equal(t, rv.srv.Base(), req["url"])
	h := req["headers"].(map[string]any)
	require.Equal(t, id, h["Webhook-Id"])
	require.Equal(t, "application/json", h["Content-Type"])
	require.Equal(t, webhooks.MaskedValue, h["Authorization"])
	require.NotContains(t, h, "Webhook-Signature")

	r = b.do(t, "GET", path, admin, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Nil(t, r.json(t)["event"], "without events:read the event is not shown")

	b.do(t, "GET", fmt.Sprintf("/v1/webhooks/%s/deliveries/%d", sub["id"], seq+100), owner, "").problem(t, http.StatusNotFound)
	b.do(t, "GET", fmt.Sprintf("/v1/webhooks/%s/deliveries/x", sub["id"]), owner, "").problem(t, http.StatusNotFound)
	b.do(t, "GET", path, writer, "").problem(t, http.StatusNotFound)
}
