package console_test

import (
	"net/http"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
)

// consumerLag matches a consumer's row on the lag page and captures its
// name and lag.
var consumerLag = regexp.MustCompile(`<tr data-testid="consumer-row" data-name="([a-z_]+)">[^<]*<td[^>]*><strong>[a-z_]+</strong></td>\s*` +
	`<td[^>]* data-testid="consumer-last-seq">seq (\d+)</td>\s*<td[^>]* data-testid="consumer-head">seq (\d+)</td>\s*` +
	`<td[^>]* data-testid="consumer-lag">(\d+)</td>`)

// TestConsole_Lag: the lag page shows the event log's consumers to a
// session whose token has ops:read, and to any other says which scope
// would show them; the subscriptions' pending deliveries are there in
// both.
func TestConsole_Lag(t *testing.T) {
	t.Parallel()
	// Role api: no rounds run, so the cursors stay at 0.
	b := setup(t)
	ops := b.principal(t, "ops", authz.RightWrite, "acme", slices.Concat(apptest.AllScopes, []string{authz.ScopeOpsRead})...)
	plain := b.principal(t, "plain", authz.RightWrite, "acme")
	sub := b.createSubscription(t, plain, "acme", "http://127.0.0.1:9/hook")
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/spaces/acme/events", ops,
		map[string]any{"events": []map[string]any{{"type": "item.created"}, {"type": "item.updated"}}}, nil))

	t.Run("WithOpsReadShowsTheConsumers", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		br.signIn(ops)
		p := br.get("/console/lag")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Contains(t, p.body, `<table id="consumers" data-testid="consumers"`)
		rows := consumerLag.FindAllStringSubmatch(p.body, -1)
		require.Len(t, rows, 3, p.body)
		for i, name := range []string{"event_types", "push", "webhooks"} {
			require.Equal(t, []string{name, "0", "2", "2"}, rows[i][1:])
		}
		require.Contains(t, p.body, ` data-testid="consumer-lost">none</td>`)
		require.NotContains(t, p.body, `id="consumers-scope"`)
	})

	t.Run("WithoutOpsReadNamesTheScope", func(t *testing.T) {
		t.Parallel()
		br := b.browser(t)
		br.signIn(plain)
		p := br.get("/console/lag")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.NotContains(t, p.body, `id="consumers"`)
		require.NotContains(t, p.body, `data-testid="consumer-row"`)
		require.Regexp(t, `<p id="consumers-scope"[^>]*>[^<]*`+authz.ScopeOpsRead, p.body)
		require.Contains(t, p.body, `<tr data-testid="lag-row" data-id="`+sub+`">`, "the subscriptions stay")
	})
}
