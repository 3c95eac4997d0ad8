package httpapi_test

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
)

var allScopes = apptest.AllScopes

func TestAPI_Authentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.principal(t, "alice", authz.RightAdmin, "s1", allScopes...)
	const path = "/v1/webhooks"

	t.Run("NoTokenIs401WithChallenge", func(t *testing.T) {
		r := b.do(t, "GET", path, "", "")
		require.Contains(t, r.problem(t, http.StatusUnauthorized), "Authorization: Bearer")
		require.Equal(t, `Bearer realm="bothy"`, r.header.Get("WWW-Authenticate"))
	})
	t.Run("UnknownTokenIs401", func(t *testing.T) {
		r := b.do(t, "GET", path, "bothy_00000000000000000000000000000000_nope", "")
		r.problem(t, http.StatusUnauthorized)
	})
	t.Run("WrongSchemeIs401", func(t *testing.T) {
		req, err := http.NewRequest("GET", b.base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:"+good)))
		send(t, req).problem(t, http.StatusUnauthorized)
	})
	t.Run("TamperedSecretIs401", func(t *testing.T) {
		b.do(t, "GET", path, good[:len(good)-2]+"xx", "").problem(t, http.StatusUnauthorized)
	})
	t.Run("GoodTokenIs200", func(t *testing.T) {
		r := b.do(t, "GET", path, good, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	})
	t.Run("UnknownPathIsProblem404", func(t *testing.T) {
		b.do(t, "GET", "/v1/nothing-here", good, "").problem(t, http.StatusNotFound)
	})
	t.Run("WrongMethodIsProblem405WithAllow", func(t *testing.T) {
		r := b.do(t, "DELETE", "/v1/webhooks", good, "")
		r.problem(t, http.StatusMethodNotAllowed)
		require.Equal(t, "GET, POST", r.header.Get("Allow"))
	})
	t.Run("WrongMethodOnAnotherModulesRouteIs405", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/push/vapid-public-key", good, "")
		r.problem(t, http.StatusMethodNotAllowed)
		require.Equal(t, "GET", r.header.Get("Allow"))
	})
	t.Run("OpenAPIIsPublic", func(t *testing.T) {
		r := b.do(t, "GET", "/v1/openapi.json", "", "")
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "3.1.0", r.json(t)["openapi"])
	})
}

func TestAPI_AppendEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
	reader := b.principal(t, "reader", authz.RightRead, "s1", allScopes...)
	noScope := b.principal(t, "noscope", authz.RightAdmin, "s1", authz.ScopeEventsRead)
	const path = "/v1/spaces/s1/events"

	t.Run("AppendsInOrderWithSeqAndActor", func(t *testing.T) {
		r := b.do(t, "POST", path, writer, `{"events":[{"type":"item.created","data":{"n":1}},{"type":"item.updated","data":{"n":2}}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		evs := r.json(t)["events"].([]any)
		require.Len(t, evs, 2)
		e0, e1 := evs[0].(map[string]any), evs[1].(map[string]any)
		require.Equal(t, "writer", e0["actor"])
		require.Equal(t, "s1", e0["space"])
		require.Equal(t, e0["seq"].(float64)+1, e1["seq"])
		require.Equal(t, map[string]any{"n": 2.0}, e1["data"])
	})
	t.Run("ReadRightIs403", func(t *testing.T) {
		require.Contains(t, b.do(t, "POST", path, reader, `{"events":[{"type":"item.created"}]}`).problem(t, http.StatusForbidden), "write")
	})
	t.Run("MissingScopeIs403", func(t *testing.T) {
		require.Contains(t, b.do(t, "POST", path, noScope, `{"events":[{"type":"item.created"}]}`).problem(t, http.StatusForbidden), "events:write")
	})
	t.Run("OtherSpaceIs403", func(t *testing.T) {
		b.do(t, "POST", "/v1/spaces/s2/events", writer, `{"events":[{"type":"item.created"}]}`).problem(t, http.StatusForbidden)
	})
	t.Run("BadSpaceNameIs403", func(t *testing.T) {
		b.do(t, "POST", "/v1/spaces/%20bad/events", writer, `{"events":[{"type":"item.created"}]}`).problem(t, http.StatusForbidden)
	})
	t.Run("BadTypeIs422", func(t *testing.T) {
		require.Contains(t, b.do(t, "POST", path, writer, `{"events":[{"type":"Created"}]}`).problem(t, http.StatusUnprocessableEntity), "events[0]")
	})
	t.Run("DataNotObjectIs422", func(t *testing.T) {
		b.do(t, "POST", path, writer, `{"events":[{"type":"item.created","data":[1]}]}`).problem(t, http.StatusUnprocessableEntity)
	})
	t.Run("NoEventsIs422", func(t *testing.T) {
		b.do(t, "POST", path, writer, `{"events":[]}`).problem(t, http.StatusUnprocessableEntity)
	})
	t.Run("UnknownFieldIs400", func(t *testing.T) {
		require.Contains(t, b.do(t, "POST", path, writer, `{"events":[{"type":"item.created","payload":{}}]}`).problem(t, http.StatusBadRequest), `"payload"`)
	})
	t.Run("WrongFieldTypeIs400", func(t *testing.T) {
		require.Contains(t, b.do(t, "POST", path, writer, `{"events":{"type":"item.created"}}`).problem(t, http.StatusBadRequest), `"events"`)
	})
	t.Run("MalformedJSONIs400", func(t *testing.T) {
		b.do(t, "POST", path, writer, `{"events":[`).problem(t, http.StatusBadRequest)
	})
	t.Run("TrailingDataIs400", func(t *testing.T) {
		b.do(t, "POST", path, writer, `{"events":[{"type":"item.created"}]} {}`).problem(t, http.StatusBadRequest)
	})
	t.Run("EmptyBodyIs400", func(t *testing.T) {
		b.do(t, "POST", path, writer, "").problem(t, http.StatusBadRequest)
	})
	t.Run("OversizedBodyIs413", func(t *testing.T) {
		big := `{"events":[{"type":"item.created","data":{"x":"` + strings.Repeat("a", 2<<20) + `"}}]}`
		b.do(t, "POST", path, writer, big).problem(t, http.StatusRequestEntityTooLarge)
	})
	t.Run("WrongContentTypeIs415", func(t *testing.T) {
		req, err := http.NewRequest("POST", b.base+path, strings.NewReader(`{"events":[{"type":"item.created"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+writer)
		req.Header.Set("Content-Type", "text/plain")
		send(t, req).problem(t, http.StatusUnsupportedMediaType)
	})
}

func TestAPI_Webhooks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	admin := b.principal(t, "boss", authz.RightAdmin, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightRead, "s1", allScopes...)
	noManage := b.principal(t, "nomanage", authz.RightRead, "s1", authz.ScopeEventsRead)
	outsider := b.principal(t, "outsider", "", "", allScopes...)
	rv := newReceiver(t)

	r := b.do(t, "POST", "/v1/webhooks", owner, fmt.Sprintf(`{"space":"s1","url":%q,"event_types":["item.*"]}`, rv.url()))
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	id := sub["id"].(string)
	secret := sub["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "whsec_"))
	require.Equal(t, "/v1/webhooks/"+id, r.header.Get("Location"))
	require.Equal(t, "active", sub["status"])
	rv.setSecret(t, secret)
	sp := "/v1/webhooks/" + id

	t.Run("CreateRefusals", func(t *testing.T) {
		url := fmt.Sprintf("%q", rv.srv.Base())
		b.do(t, "POST", "/v1/webhooks", noManage, `{"space":"s1","url":`+url+`}`).problem(t, http.StatusForbidden)
		b.do(t, "POST", "/v1/webhooks", outsider, `{"space":"s1","url":`+url+`}`).problem(t, http.StatusForbidden)
		b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":"ftp://example.com/x"}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1"}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"event_types":["Bad Type"]}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"events":["*"]}`).problem(t, http.StatusBadRequest), `"events"`)
		b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":"`+strings.Repeat("a", 1<<20)+`"}`).problem(t, http.StatusRequestEntityTooLarge)
	})

	t.Run("DeliversSignedEventsAndListsAttempts", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"item.created","data":{"n":1}},{"type":"other.thing"},{"type":"item.updated"}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		got := rv.waitFor(t, 2)
		require.Equal(t, "item.created", got[0]["type"])
		require.Equal(t, "item.updated", got[1]["type"])

		require.Eventually(t, func() bool {
			ds := b.do(t, "GET", sp+"/deliveries?status=delivered", owner, "").json(t)["deliveries"].([]any)
			return len(ds) == 2
		}, 10*time.Second, 50*time.Millisecond)
		ds := b.do(t, "GET", sp+"/deliveries", owner, "").json(t)["deliveries"].([]any)
		d0 := ds[0].(map[string]any) // newest first
		require.Equal(t, "delivered", d0["status"])
		atts := d0["attempt_list"].([]any)
		require.Len(t, atts, 1)
		require.EqualValues(t, 204, atts[0].(map[string]any)["status_code"])

		require.Len(t, b.do(t, "GET", sp+"/deliveries?limit=1", owner, "").json(t)["deliveries"].([]any), 1)
		b.do(t, "GET", sp+"/deliveries?limit=0", owner, "").problem(t, http.StatusBadRequest)
		b.do(t, "GET", sp+"/deliveries?status=lost", owner, "").problem(t, http.StatusBadRequest)

		// Filters: one event's delivery, and a range of creation times.
		older := ds[1].(map[string]any)
		byEvent := b.do(t, "GET", sp+"/deliveries?event_id="+older["event_id"].(string), owner, "").json(t)["deliveries"].([]any)
		require.Len(t, byEvent, 1)
		require.Equal(t, older["seq"], byEvent[0].(map[string]any)["seq"])
		require.Empty(t, b.do(t, "GET", sp+"/deliveries?event_id="+uuid.NewString(), owner, "").json(t)["deliveries"])
		created, err := time.Parse(time.RFC3339Nano, older["created_at"].(string))
		require.NoError(t, err)
		q := url.Values{"since": {created.Add(-time.Hour).Format(time.RFC3339)}, "until": {created.Add(time.Hour).Format(time.RFC3339)}}
		require.Len(t, b.do(t, "GET", sp+"/deliveries?"+q.Encode(), owner, "").json(t)["deliveries"].([]any), 2)
		q = url.Values{"since": {created.Add(time.Hour).Format(time.RFC3339)}}
		require.Empty(t, b.do(t, "GET", sp+"/deliveries?"+q.Encode(), owner, "").json(t)["deliveries"])
		q = url.Values{"until": {created.Add(-time.Hour).Format(time.RFC3339)}}
		require.Empty(t, b.do(t, "GET", sp+"/deliveries?"+q.Encode(), owner, "").json(t)["deliveries"])
		// By event type: the subscription's item.* delivered two types.
		byType := b.do(t, "GET", sp+"/deliveries?type=item.created", owner, "").json(t)["deliveries"].([]any)
		require.Len(t, byType, 1)
		require.Equal(t, older["seq"], byType[0].(map[string]any)["seq"])
		byType = b.do(t, "GET", sp+"/deliveries?type=item.updated", owner, "").json(t)["deliveries"].([]any)
		require.Len(t, byType, 1)
		require.Equal(t, d0["seq"], byType[0].(map[string]any)["seq"])
		require.Len(t, b.do(t, "GET", sp+"/deliveries?type=item.*", owner, "").json(t)["deliveries"].([]any), 2)
		require.Empty(t, b.do(t, "GET", sp+"/deliveries?type=other.thing", owner, "").json(t)["deliveries"])
		require.Contains(t, b.do(t, "GET", sp+"/deliveries?type=Item.*", owner, "").problem(t, http.StatusBadRequest), "type")
		require.Contains(t, b.do(t, "GET", sp+"/deliveries?event_id=nope", owner, "").problem(t, http.StatusBadRequest), "event_id")
		require.Contains(t, b.do(t, "GET", sp+"/deliveries?since=yesterday", owner, "").problem(t, http.StatusBadRequest), "since")
		require.Contains(t, b.do(t, "GET", sp+"/deliveries?until=2026-13-01T00:00:00Z", owner, "").problem(t, http.StatusBadRequest), "until")
		q = url.Values{"since": {"2026-01-02T00:00:00Z"}, "until": {"2026-01-01T00:00:00Z"}}
		require.Contains(t, b.do(t, "GET", sp+"/deliveries?"+q.Encode(), owner, "").problem(t, http.StatusBadRequest), "since")
	})

	t.Run("GetAndListForOwnerAndSpaceAdmin", func(t *testing.T) {
		r := b.do(t, "GET", sp, owner, "")
		require.Equal(t, http.StatusOK, r.status)
		require.Nil(t, r.json(t)["secret"], "the secret is shown once")
		require.Equal(t, http.StatusOK, b.do(t, "GET", sp, admin, "").status)
		require.Len(t, b.do(t, "GET", "/v1/webhooks", owner, "").json(t)["subscriptions"], 1)
		require.Len(t, b.do(t, "GET", "/v1/webhooks?space=s1", admin, "").json(t)["subscriptions"], 1)
		require.Empty(t, b.do(t, "GET", "/v1/webhooks", admin, "").json(t)["subscriptions"], "without ?space only own")
		require.Empty(t, b.do(t, "GET", "/v1/webhooks?space=s1", stranger, "").json(t)["subscriptions"])
		b.do(t, "GET", "/v1/webhooks?space=s1", noManage, "").problem(t, http.StatusForbidden)
	})

	t.Run("OthersAreRefused", func(t *testing.T) {
		b.do(t, "GET", sp, stranger, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", sp, outsider, "").problem(t, http.StatusNotFound)
		b.do(t, "POST", sp+"/disable", stranger, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", sp, "", "").problem(t, http.StatusUnauthorized)
	})

	t.Run("OwnerWithoutScopeIs403", func(t *testing.T) {
		ctx := t.Context()
		_, bearer, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "owner", Scopes: []string{authz.ScopeEventsRead}})
		require.NoError(t, err)
		b.do(t, "GET", sp, bearer, "").problem(t, http.StatusForbidden)
		b.do(t, "PATCH", sp, bearer, `{"event_types":["*"]}`).problem(t, http.StatusForbidden)
	})

	t.Run("BadIDsAre404", func(t *testing.T) {
		b.do(t, "GET", "/v1/webhooks/not-a-uuid", owner, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", "/v1/webhooks/0199c0de-0000-7000-8000-000000000000", owner, "").problem(t, http.StatusNotFound)
	})

	t.Run("Update", func(t *testing.T) {
		r := b.do(t, "PATCH", sp, owner, `{"event_types":["*"]}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, []any{"*"}, r.json(t)["event_types"])
		b.do(t, "PATCH", sp, owner, `{}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "PATCH", sp, owner, `{"url":"http://"}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "PATCH", sp, owner, `{"secret":"whsec_x"}`).problem(t, http.StatusBadRequest)
		b.do(t, "PATCH", sp, owner, `{"event_types":["NO"]}`).problem(t, http.StatusUnprocessableEntity)
		r = b.do(t, "PATCH", sp, owner, fmt.Sprintf(`{"url":%q}`, rv.srv.Base()+"/hook/"))
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, rv.srv.Base()+"/hook/", r.json(t)["url"])
	})

	t.Run("RotateSecretSignsWithBoth", func(t *testing.T) {
		b.do(t, "POST", sp+"/rotate-secret", owner, `{"overlap_seconds":-1}`).problem(t, http.StatusUnprocessableEntity)
		r := b.do(t, "POST", sp+"/rotate-secret", owner, `{"overlap_seconds":0}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		newSecret := r.json(t)["secret"].(string)
		require.NotEqual(t, secret, newSecret)
		rv.setSecret(t, newSecret) // no overlap: only the new one signs
		n := len(rv.waitFor(t, 0))
		require.Equal(t, http.StatusCreated, b.do(t, "POST", "/v1/spaces/s1/events", owner, `{"events":[{"type":"other.thing"}]}`).status)
		got := rv.waitFor(t, n+1)
		require.Equal(t, "other.thing", got[n]["type"], "the updated filter (*) applies")
		r = b.do(t, "POST", sp+"/rotate-secret", owner, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.EqualValues(t, 86400, r.json(t)["overlap_seconds"])
	})

	t.Run("DisableAndEnable", func(t *testing.T) {
		r := b.do(t, "POST", sp+"/disable", owner, `{"reason":"maintenance"}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		s := r.json(t)
		require.Equal(t, "disabled", s["status"])
		require.Equal(t, "manual", s["disabled_cause"])
		require.Equal(t, "maintenance", s["disabled_detail"])
		b.do(t, "POST", sp+"/disable", owner, `{"why":"x"}`).problem(t, http.StatusBadRequest)

		r = b.do(t, "POST", sp+"/enable", admin, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		e := r.json(t)
		require.Equal(t, "manual", e["was_cause"])
		require.Equal(t, "active", e["subscription"].(map[string]any)["status"])
	})
}

func TestAPI_Push(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.principal(t, "alice", authz.RightRead, "s1", authz.ScopePushManage)
	bob := b.principal(t, "bob", authz.RightRead, "s1", authz.ScopePushManage+"@s1")
	noScope := b.principal(t, "carol", authz.RightRead, "s1", authz.ScopeEventsRead)

	key, err := ecdh.P256().GenerateKey(rand.Reader)
	require.NoError(t, err)
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	reg := fmt.Sprintf(`{"subscription":{"endpoint":"https://push.example.com/send/abc","expirationTime":null,"keys":{"p256dh":%q,"auth":%q}},"user_agent":"test"}`,
		base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(auth))

	r := b.do(t, "POST", "/v1/push/registrations", alice, reg)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	id := r.json(t)["id"].(string)
	require.Equal(t, "/v1/push/registrations/"+id, r.header.Get("Location"))

	t.Run("ListAndGetOwn", func(t *testing.T) {
		regs := b.do(t, "GET", "/v1/push/registrations", alice, "").json(t)["registrations"].([]any)
		require.Len(t, regs, 1)
		require.Equal(t, "https://push.example.com/send/abc", regs[0].(map[string]any)["endpoint"])
		require.NotContains(t, string(b.do(t, "GET", "/v1/push/registrations/"+id, alice, "").body), "p256dh", "keys are not echoed")
		require.Empty(t, b.do(t, "GET", "/v1/push/registrations", bob, "").json(t)["registrations"])
	})
	t.Run("Refusals", func(t *testing.T) {
		b.do(t, "GET", "/v1/push/registrations/"+id, bob, "").problem(t, http.StatusNotFound)
		b.do(t, "DELETE", "/v1/push/registrations/"+id, bob, "").problem(t, http.StatusNotFound)
		b.do(t, "GET", "/v1/push/registrations", noScope, "").problem(t, http.StatusForbidden)
		b.do(t, "POST", "/v1/push/registrations", noScope, reg).problem(t, http.StatusForbidden)
		b.do(t, "GET", "/v1/push/registrations", "", "").problem(t, http.StatusUnauthorized)
		b.do(t, "GET", "/v1/push/registrations/xyz", alice, "").problem(t, http.StatusNotFound)
		b.do(t, "POST", "/v1/push/registrations", alice, `{"subscription":{"endpoint":"http://10.0.0.1/x","keys":{"p256dh":"AA","auth":"AA"}}}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "POST", "/v1/push/registrations", alice, `{"subscription":{"endpoint":"https://x.example/","keys":{"p256dh":"AA","auth":"AA","extra":1}}}`).problem(t, http.StatusBadRequest)
	})
	t.Run("Preferences", func(t *testing.T) {
		const pp = "/v1/spaces/s1/push-preference"
		require.Equal(t, true, b.do(t, "GET", pp, alice, "").json(t)["notify"])
		r := b.do(t, "PUT", pp, alice, `{"notify":false}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Equal(t, false, b.do(t, "GET", pp, alice, "").json(t)["notify"])
		require.Equal(t, true, b.do(t, "GET", pp, bob, "").json(t)["notify"], "per principal")
		b.do(t, "PUT", pp, alice, `{}`).problem(t, http.StatusUnprocessableEntity)
		b.do(t, "PUT", pp, alice, `{"notify":"no"}`).problem(t, http.StatusBadRequest)
		b.do(t, "GET", "/v1/spaces/s2/push-preference", alice, "").problem(t, http.StatusForbidden)
		b.do(t, "GET", "/v1/spaces/s2/push-preference", bob, "").problem(t, http.StatusForbidden)
		b.do(t, "PUT", pp, noScope, `{"notify":false}`).problem(t, http.StatusForbidden)
	})
	t.Run("DeleteOwn", func(t *testing.T) {
		r := b.do(t, "DELETE", "/v1/push/registrations/"+id, alice, "")
		require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
		b.do(t, "GET", "/v1/push/registrations/"+id, alice, "").problem(t, http.StatusNotFound)
	})
}

func TestAPI_RiverUI(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("WithoutTokenIs401", func(t *testing.T) {
		r := b.do(t, "GET", "/admin/river/", "", "")
		r.problem(t, http.StatusUnauthorized)
		require.Contains(t, r.header.Get("WWW-Authenticate"), "Basic")
		b.do(t, "GET", "/admin/river/api/jobs?state=available", "wrong-token-wrong-token", "").problem(t, http.StatusUnauthorized)
	})
	t.Run("BasicAuthServesTheUI", func(t *testing.T) {
		req, err := http.NewRequest("GET", b.base+"/admin/river/", nil)
		require.NoError(t, err)
		req.SetBasicAuth("admin", adminToken)
		r := send(t, req)
		require.Equal(t, http.StatusOK, r.status)
		require.Contains(t, string(r.body), "<html")
	})
	t.Run("BearerServesTheAPI", func(t *testing.T) {
		r := b.do(t, "GET", "/admin/river/api/jobs?state=completed&limit=5", adminToken, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Contains(t, r.json(t), "data")
		r = b.do(t, "GET", "/admin/river/api/states", adminToken, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	})
}
