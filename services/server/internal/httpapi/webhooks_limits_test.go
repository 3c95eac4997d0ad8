package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// TestAPI_WebhookLimitsAndRotation checks what the API makes of the
// webhooks store's limits and rotation rule: a 422 problem that names the
// field and the configuration key, and a 409 for a second rotation while
// the previous secret still signs.
func TestAPI_WebhookLimitsAndRotation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	rv := newReceiver(t)
	url := fmt.Sprintf("%q", rv.url())
	types := func(n int) string {
		ts := make([]string, n)
		for i := range ts {
			ts[i] = fmt.Sprintf("item.t%d", i)
		}
		raw, err := json.Marshal(ts)
		require.NoError(t, err)
		return string(raw)
	}

	detail := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"event_types":`+types(101)+`}`).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "event_types: 101 filters, at most 100 (webhooks.max_event_types)")

	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"event_types":`+types(100)+`}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sp := "/v1/webhooks/" + r.json(t)["id"].(string)

	detail = b.do(t, "PATCH", sp, owner, `{"event_types":`+types(101)+`}`).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "event_types: 101 filters, at most 100 (webhooks.max_event_types)")

	r = b.do(t, "POST", sp+"/rotate-secret", owner, `{"overlap_seconds":3600}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = b.do(t, "POST", sp+"/rotate-secret", owner, `{"overlap_seconds":3600}`)
	detail = r.problem(t, http.StatusConflict)
	require.Equal(t, "/v1/problems/conflict", r.json(t)["type"])
	require.Contains(t, detail, "the previous secret signs until ")
	r = b.do(t, "POST", sp+"/rotate-secret", owner, `{"overlap_seconds":0}`)
	require.Equal(t, http.StatusOK, r.status, "an immediate rotation is always allowed: %s", r.body)
}

// TestAPI_WebhookLimitsFollowTheConfiguration: the limits are the
// configured ones, not only the defaults.
func TestAPI_WebhookLimitsFollowTheConfiguration(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	b := &testBundle{db: db, base: startServer(t, db.URL, "api", "webhooks.max_event_types", "2",
		"webhooks.max_subscriptions_per_space", "1")}
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	url := `"http://127.0.0.1:9/hook"`
	detail := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"event_types":["a","b","c"]}`).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "at most 2 (webhooks.max_event_types)")
	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"event_types":["a","b"]}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	detail = b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`}`).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "webhooks.max_subscriptions_per_space")
}

// TestAPI_PrivateTargetFollowsTheConfiguration: a loopback target is a 422
// that names webhooks.allow_private_targets while it is off, and accepted
// once it is on, for create and update alike.
func TestAPI_PrivateTargetFollowsTheConfiguration(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	strict := &testBundle{db: db, base: startServer(t, db.URL, "api", "webhooks.allow_private_targets", "false")}
	lenient := &testBundle{db: db, base: startServer(t, db.URL, "api")}
	owner := strict.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	body := `{"space":"s1","url":"http://127.0.0.1:9/hook"}`

	detail := strict.do(t, "POST", "/v1/webhooks", owner, body).problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "url: address 127.0.0.1 is not public (loopback)")
	require.Contains(t, detail, "webhooks.allow_private_targets = true")

	r := lenient.do(t, "POST", "/v1/webhooks", owner, body)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	detail = strict.do(t, "PATCH", "/v1/webhooks/"+r.json(t)["id"].(string), owner, `{"url":"http://localhost:9/other"}`).
		problem(t, http.StatusUnprocessableEntity)
	require.Contains(t, detail, "webhooks.allow_private_targets")
}
