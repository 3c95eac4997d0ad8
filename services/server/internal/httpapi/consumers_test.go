package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

type consumersAnswer struct {
	Consumers []struct {
		Name              string     `json:"name"`
		LastSeq           int64      `json:"last_seq"`
		Head              int64      `json:"head_seq"`
		Lag               int64      `json:"lag"`
		PendingAgeSeconds float64    `json:"pending_age_seconds"`
		LastRoundAt       *time.Time `json:"last_round_at"`
		Lost              *struct {
			From int64 `json:"from"`
			To   int64 `json:"to"`
		} `json:"lost"`
	} `json:"consumers"`
}

func (b *testBundle) consumers(t *testing.T, token string) *consumersAnswer {
	t.Helper()
	r := b.do(t, "GET", "/v1/consumers", token, "")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var out consumersAnswer
	require.NoError(t, json.Unmarshal(r.body, &out))
	return &out
}

// TestAPI_Consumers: GET /v1/consumers answers every consumer's cursor,
// the head and the lag to a token with ops:read, and 403 naming the scope
// to any other token, whatever its rights on spaces.
func TestAPI_Consumers(t *testing.T) {
	t.Parallel()

	t.Run("WithoutRoundsLagIsEveryAppendedEvent", func(t *testing.T) {
		t.Parallel()
		// The api role runs no rounds: the cursors stay where they are.
		db := dbtest.NewDB(t)
		b := &testBundle{db: db, base: startServer(t, db.URL, "api")}
		writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
		ops := b.principal(t, "ops", "", "", authz.ScopeOpsRead)
		r := b.do(t, "POST", "/v1/spaces/s1/events", writer, `{"events":[{"type":"item.a"},{"type":"item.b"},{"type":"item.c"}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

		got := b.consumers(t, ops)
		require.Len(t, got.Consumers, 3)
		require.Equal(t, "event_types", got.Consumers[0].Name)
		require.Equal(t, "push", got.Consumers[1].Name)
		require.Equal(t, "webhooks", got.Consumers[2].Name)
		for _, c := range got.Consumers {
			require.EqualValues(t, 0, c.LastSeq, c.Name)
			require.EqualValues(t, 3, c.Head, c.Name)
			require.EqualValues(t, 3, c.Lag, c.Name)
			require.GreaterOrEqual(t, c.PendingAgeSeconds, 0.0, c.Name)
			require.Nil(t, c.LastRoundAt, c.Name)
			require.Nil(t, c.Lost, "retention removed nothing")
		}
	})

	t.Run("WithRoundsLagReturnsToZero", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		writer := b.principal(t, "writer", authz.RightWrite, "s1", authz.ScopeEventsWrite)
		ops := b.principal(t, "ops", "", "", authz.ScopeOpsRead)
		r := b.do(t, "POST", "/v1/spaces/s1/events", writer, `{"events":[{"type":"item.a"},{"type":"item.b"}]}`)
		require.Equal(t, http.StatusCreated, r.status, "%s", r.body)

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := b.consumers(t, ops)
			require.Len(c, got.Consumers, 3)
			for _, s := range got.Consumers {
				require.EqualValues(c, 2, s.LastSeq, s.Name)
				require.EqualValues(c, 0, s.Lag, s.Name)
				require.NotNil(c, s.LastRoundAt, s.Name)
			}
		}, 20*time.Second, 50*time.Millisecond)
	})

	t.Run("WithoutTheScopeIsForbidden", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewDB(t)
		b := &testBundle{db: db, base: startServer(t, db.URL, "api")}
		admin := b.principal(t, "admin", authz.RightAdmin, "s1", authz.ScopeEventsRead, authz.ScopeEventsWrite,
			authz.ScopeWebhooksManage, authz.ScopePushManage)
		detail := b.do(t, "GET", "/v1/consumers", admin, "").problem(t, http.StatusForbidden)
		require.Contains(t, detail, authz.ScopeOpsRead)
		b.do(t, "GET", "/v1/consumers", "", "").problem(t, http.StatusUnauthorized)
	})
}
