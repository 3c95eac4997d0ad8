package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func TestAPI_WebhookStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	owner := b.principal(t, "owner", authz.RightWrite, "s1", allScopes...)
	admin := b.principal(t, "boss", authz.RightAdmin, "s1", allScopes...)
	stranger := b.principal(t, "stranger", authz.RightWrite, "s1", allScopes...)
	outsider := b.principal(t, "outsider", "", "", allScopes...)
	_, ownerNoManage, err := authz.CreateToken(ctx, b.db.Pool, &authz.CreateTokenParams{Principal: "owner", Scopes: []string{authz.ScopeEventsRead}})
	require.NoError(t, err)

	r := b.do(t, "POST", "/v1/webhooks", owner, `{"space":"s1","url":"http://127.0.0.1:9/hook"}`)
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	id := r.json(t)["id"].(string)
	sp := "/v1/webhooks/" + id + "/stats"

	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for i, a := range []struct {
		at     time.Duration
		status any
		secs   float64
	}{{time.Minute, 200, 0.1}, {2 * time.Minute, 200, 0.3}, {3 * time.Minute, 503, 1}, {2*time.Hour + time.Minute, nil, 0}} {
		_, err := b.db.Pool.Exec(ctx, `INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds)
VALUES ($1, $2, $3, $4, $5)`, id, i+1, t0.Add(a.at), a.status, a.secs)
		require.NoError(t, err)
	}
	window := "?" + url.Values{"since": {t0.Format(time.RFC3339)}, "until": {t0.Add(3 * time.Hour).Format(time.RFC3339)}, "step": {"1h"}}.Encode()

	t.Run("AnswersTheSeriesOfTheWindow", func(t *testing.T) {
		for _, token := range []string{owner, admin} {
			r := b.do(t, "GET", sp+window, token, "")
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			v := r.json(t)
			require.EqualValues(t, 2, v["ok"])
			require.EqualValues(t, 2, v["failed"])
			require.EqualValues(t, 0.5, v["success_rate"])
			require.EqualValues(t, 3600, v["step_seconds"])
			iv := v["intervals"].([]any)
			require.Len(t, iv, 3)
			first := iv[0].(map[string]any)
			require.Equal(t, t0.Format(time.RFC3339), first["start"])
			require.EqualValues(t, 2, first["ok"])
			require.EqualValues(t, 1, first["failed"])
			require.EqualValues(t, 0.3, first["latency_p50_seconds"])
			empty := iv[1].(map[string]any)
			require.Nil(t, empty["latency_p50_seconds"])
			require.Contains(t, empty, "success_rate", "null, not absent")
			require.Nil(t, empty["success_rate"])
			third := iv[2].(map[string]any)
			require.EqualValues(t, 1, third["failed"])
			require.Nil(t, third["latency_p95_seconds"], "a refusal sent no request")
		}
		r := b.do(t, "GET", sp+"?step=3600", owner, "")
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.Len(t, r.json(t)["intervals"], 24, "the last day by hour")
	})

	t.Run("RefusesABadParameterNamingIt", func(t *testing.T) {
		for q, want := range map[string]string{
			"?since=yesterday":  "since:",
			"?until=2026-12-01": "until:",
			"?step=often":       "step:",
			"?step=0":           "step:",
			"?step=1s":          "step: 1s, want 1m0s to 24h0m0s",
			"?step=1m":          "step: 1m0s makes 1440 intervals",
			"?since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z": "since:",
			"?window=1h": `unknown query parameter "window"`,
		} {
			require.Contains(t, b.do(t, "GET", sp+q, owner, "").problem(t, http.StatusBadRequest), want, "query %s", q)
		}
	})

	t.Run("OthersCannotReadIt", func(t *testing.T) {
		for _, token := range []string{stranger, outsider} {
			require.Contains(t, b.do(t, "GET", sp+window, token, "").problem(t, http.StatusNotFound), "no such webhook subscription")
		}
		b.do(t, "GET", sp+window, ownerNoManage, "").problem(t, http.StatusForbidden)
		b.do(t, "GET", sp, "", "").problem(t, http.StatusUnauthorized)
		b.do(t, "GET", fmt.Sprintf("/v1/webhooks/%s/stats", "0199c0de-0000-7000-8000-000000000001"), owner, "").problem(t, http.StatusNotFound)
	})
}
