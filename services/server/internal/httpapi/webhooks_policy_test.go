package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestAPI_WebhookPolicy: create and PATCH take the delivery policy, its
// throttle and retry schedule, GET and list show them (the schedule only
// where it is not the server's), and a bad value is a 422 problem that
// names the field.
func TestAPI_WebhookPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	url := `"http://127.0.0.1:9/hook"`

	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	got := r.json(t)
	require.Equal(t, "ordered", got["policy"], "the default")
	require.Equal(t, false, got["auto_recover"])
	require.Equal(t, false, got["probing"])
	for _, k := range []string{"max_in_flight", "max_requests_per_second", "retry_base_seconds", "retry_max_seconds", "retry_budget_seconds"} {
		require.NotContains(t, got, k, "the server's unless set")
	}

	r = b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"policy":"unordered","max_in_flight":25,
		"max_requests_per_second":12.5,"retry_base_seconds":0.5,"retry_max_seconds":60,"retry_budget_seconds":3600}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	got = r.json(t)
	require.Equal(t, "unordered", got["policy"])
	require.EqualValues(t, 25, got["max_in_flight"])
	require.EqualValues(t, 12.5, got["max_requests_per_second"])
	require.EqualValues(t, 0.5, got["retry_base_seconds"])
	require.EqualValues(t, 60, got["retry_max_seconds"])
	require.EqualValues(t, 3600, got["retry_budget_seconds"])
	sp := "/v1/webhooks/" + got["id"].(string)

	r = b.do(t, "PATCH", sp, owner, `{"policy":"ordered","auto_recover":true}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, true, r.json(t)["auto_recover"])
	r = b.do(t, "PATCH", sp, owner, `{"policy":"ordered_dead_letter","max_requests_per_second":0,"retry_base_seconds":0}`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	got = b.do(t, "GET", sp, owner, "").json(t)
	require.Equal(t, "ordered_dead_letter", got["policy"])
	require.Equal(t, false, got["auto_recover"], "only ordered probes: another policy turns it off")
	require.NotContains(t, got, "max_in_flight", "only unordered has one")
	require.NotContains(t, got, "max_requests_per_second", "0 removed the throttle")
	require.NotContains(t, got, "retry_base_seconds", "0 returned it to the server's")
	require.EqualValues(t, 60, got["retry_max_seconds"], "unchanged")

	list := b.do(t, "GET", "/v1/webhooks?space=s1", owner, "").json(t)["subscriptions"].([]any)
	require.Len(t, list, 2)
	require.Equal(t, "ordered_dead_letter", list[1].(map[string]any)["policy"])

	for _, tc := range []struct{ method, path, body, detail string }{
		{"POST", "/v1/webhooks", `{"space":"s1","url":` + url + `,"policy":"fifo"}`, `policy: "fifo", want ordered, ordered_dead_letter or unordered`},
		{"POST", "/v1/webhooks", `{"space":"s1","url":` + url + `,"max_in_flight":5}`, "max_in_flight: only with policy unordered"},
		{"POST", "/v1/webhooks", `{"space":"s1","url":` + url + `,"policy":"unordered","auto_recover":true}`, "auto_recover: only with policy ordered (this one is unordered)"},
		{"POST", "/v1/webhooks", `{"space":"s1","url":` + url + `,"policy":"unordered","max_in_flight":101}`, "max_in_flight: 101, want 1..100"},
		{"POST", "/v1/webhooks", `{"space":"s1","url":` + url + `,"max_requests_per_second":0.01}`, "max_requests_per_second: 0.01, want 0.1..1000"},
		{"PATCH", sp, `{"retry_base_seconds":120}`, "retry_base_seconds: 120 is above retry_max_seconds 60"},
		{"PATCH", sp, `{"retry_budget_seconds":-1}`, "retry_budget_seconds: -1, want 1..2592000"},
		{"PATCH", sp, `{"retry_budget_seconds":604800}`, "retry_budget_seconds: 604800 must be below sync.event_retention"},
	} {
		detail := b.do(t, tc.method, tc.path, owner, tc.body).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, detail, tc.detail, "%s %s", tc.method, tc.body)
	}
	got = b.do(t, "GET", sp, owner, "").json(t)
	require.EqualValues(t, 60, got["retry_max_seconds"], "a refused PATCH changes nothing")
}
