package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/httpapi"
	"github.com/bothy/bothy/services/server/internal/module"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestAPI_WebhookRecoverBeforeCreation: a recover starts at the
// subscription's creation unless the owner's own request asks for earlier
// events, which a portal link's session never may.
func TestAPI_WebhookRecoverBeforeCreation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newIDReceiver(t)
	before := b.appendEvents(t, owner, "item.created", "item.created")
	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	rv.setSecret(t, sub["secret"].(string))
	sp := "/v1/webhooks/" + sub["id"].(string)
	after := b.appendEvents(t, owner, "item.created")
	rv.waitFor(t, 1)

	t.Run("DefaultsToTheCreation", func(t *testing.T) {
		r := b.do(t, "POST", sp+"/recover", owner, `{}`)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.Equal(t, map[string]any{"from": float64(after[0]), "to": float64(after[0])}, r.json(t)["range"])
	})

	t.Run("RefusesEarlierSeqsNamingTheField", func(t *testing.T) {
		d := b.do(t, "POST", sp+"/recover", owner, fmt.Sprintf(`{"from_seq":%d}`, before[0])).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, fmt.Sprintf("from_seq: %d is before the subscription's creation (its first seq is %d)", before[0], after[0]))
		d = b.do(t, "POST", sp+"/recover", owner, `{"since":"2001-02-03T04:05:06Z"}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, "since: 2001-02-03T04:05:06Z is before the subscription was created")
	})

	t.Run("SendsEarlierEventsWhenAsked", func(t *testing.T) {
		r := b.do(t, "POST", sp+"/recover", owner, fmt.Sprintf(`{"from_seq":%d,"before_creation":true}`, before[0]))
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.EqualValues(t, 2, r.json(t)["created"])
		got := rv.waitFor(t, 3)
		require.Equal(t, before, seqsSent(got[1:3]), "in seq order")
	})

	t.Run("APortalSessionMayNotAsk", func(t *testing.T) {
		tok, err := authz.Authenticate(ctx, b.db.Pool, owner)
		require.NoError(t, err)
		log := postgres.NewEventLog(b.db.Pool, nil)
		t.Cleanup(log.Close)
		jobs, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{})
		require.NoError(t, err)
		api := httpapi.New(&module.Deps{Pool: b.db.Pool, Source: log, Jobs: jobs}, &httpapi.Config{})
		mux := http.NewServeMux()
		api.Routes(mux)
		call := func(portal bool, body string) *httptest.ResponseRecorder {
			s := &authz.Subject{Principal: "owner", TokenID: tok.TokenID, Portal: portal,
				Scopes: []string{authz.ScopeWebhooksManage + "@s1"}}
			req := httptest.NewRequestWithContext(httpapi.WithSubject(ctx, s), "POST", sp+"/recover", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, req)
			return w
		}
		w := call(true, fmt.Sprintf(`{"from_seq":%d,"before_creation":true}`, before[0]))
		require.Equal(t, http.StatusForbidden, w.Code, "%s", w.Body)
		require.Contains(t, w.Body.String(), "before_creation: a portal link's session may not")
		w = call(true, `{}`)
		require.Equal(t, http.StatusAccepted, w.Code, "a portal session recovers from the creation: %s", w.Body)
		w = call(false, fmt.Sprintf(`{"from_seq":%d,"before_creation":true}`, before[0]))
		require.Equal(t, http.StatusAccepted, w.Code, "the owner's own session may: %s", w.Body)
	})
}
