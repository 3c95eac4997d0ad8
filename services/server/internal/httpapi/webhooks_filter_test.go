package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func TestAPI_WebhookFilterAndTransform(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightWrite, "s1", allScopes...)
	rv := newHeaderReceiver(t)
	url := fmt.Sprintf("%q", rv.url())

	t.Run("BadExpressionsAre422NamingFieldAndPosition", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"space":"s1","url":` + url + `,"filter":"data.total >"}`:                                                         "filter: 1:",
			`{"space":"s1","url":` + url + `,"filter":"tenant == 1"}`:                                                          "filter: 1:1: undeclared reference to 'tenant'",
			`{"space":"s1","url":` + url + `,"filter":"type"}`:                                                                 "filter: 1:1: a filter must be a bool",
			`{"space":"s1","url":` + url + `,"transform":"{'a': 1} +"}`:                                                        "transform: 1:",
			`{"space":"s1","url":` + url + `,"filter":"` + strings.Repeat("(", 100) + "true" + strings.Repeat(")", 100) + `"}`: "filter: ",
		} {
			d := b.do(t, "POST", "/v1/webhooks", owner, body).problem(t, http.StatusUnprocessableEntity)
			require.Contains(t, d, want, body)
		}
	})

	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":`+url+`,"filter":"data.total > 100","transform":"{'total': data.total, 'kind': type}"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	sub := r.json(t)
	require.Equal(t, "data.total > 100", sub["filter"])
	rv.setSecret(t, sub["secret"].(string))
	sp := "/v1/webhooks/" + sub["id"].(string)

	t.Run("OnlyPassingEventsArriveTransformedAndSigned", func(t *testing.T) {
		r := b.do(t, "POST", "/v1/spaces/s1/events", owner,
			`{"events":[{"type":"order.created","data":{"total":50}},{"type":"order.created","data":{"total":150}},{"type":"order.created","data":{}}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
		got := rv.waitFor(t, 1)
		require.NoError(t, got[0].SigErr)
		require.JSONEq(t, `{"total": 150, "kind": "order.created"}`, string(got[0].Body))
	})

	t.Run("PreviewShowsMatchesAndBodies", func(t *testing.T) {
		r := b.do(t, "POST", sp+"/preview", owner, `{"limit": 3}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var v struct {
			Filter  string `json:"filter"`
			Results []struct {
				Matched bool            `json:"matched"`
				Body    json.RawMessage `json:"body"`
				Error   string          `json:"error"`
			} `json:"results"`
		}
		require.NoError(t, json.Unmarshal(r.body, &v))
		require.Equal(t, "data.total > 100", v.Filter)
		require.Len(t, v.Results, 3)
		require.False(t, v.Results[0].Matched)
		require.True(t, v.Results[1].Matched)
		require.JSONEq(t, `{"total": 150, "kind": "order.created"}`, string(v.Results[1].Body))
		require.Contains(t, v.Results[2].Error, "no such key: total", "an event the filter fails on: its error, not a 500")

		r = b.do(t, "POST", sp+"/preview", owner, `{"filter":"data.region == 'eu'","transform":"","event":{"type":"order.created","data":{"region":"eu"}}}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.NoError(t, json.Unmarshal(r.body, &v))
		require.True(t, v.Results[0].Matched)
		var env struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(v.Results[0].Body, &env))
		require.Equal(t, "order.created", env.Type, "without a transform, the envelope")
		require.Equal(t, map[string]any{"region": "eu"}, env.Data)

		d := b.do(t, "POST", sp+"/preview", owner, `{"transform":"type"}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, "transform: 1:1:")
		b.do(t, "POST", sp+"/preview", stranger, `{}`).problem(t, http.StatusNotFound)
	})

	t.Run("PatchChangesAndRemoves", func(t *testing.T) {
		d := b.do(t, "PATCH", sp, owner, `{"filter":"nope"}`).problem(t, http.StatusUnprocessableEntity)
		require.Contains(t, d, "filter: 1:1: undeclared reference to 'nope'")
		r := b.do(t, "PATCH", sp, owner, `{"filter":""}`)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		v := r.json(t)
		require.NotContains(t, v, "filter")
		require.Equal(t, "{'total': data.total, 'kind': type}", v["transform"])
	})
}
