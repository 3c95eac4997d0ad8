package consolebrowser

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/app/apptest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
)

// consumerRow is one consumer's cursor, head and lag as text, in the words
// the lag page writes them.
type consumerRow struct{ Cursor, Head, Lag string }

// TestConsole_LagWithOpsRead: a session whose token has ops:read sees the
// event log's consumers on the lag page, with the cursor, head and lag that
// GET /v1/consumers gives the same token and without the hint naming the
// scope; a session without ops:read gets that hint and no consumers.
func TestConsole_LagWithOpsRead(t *testing.T) {
	t.Parallel()
	// Role api: no rounds run, so the consumers' cursors stay at 0 and
	// their lag is the head, which does not move under the test.
	f := &fixture{db: dbtest.NewDB(t), receiver: newReceiver(t)}
	f.base = startServerAs(t, f.db.URL, "api")
	ops := apptest.Principal(t, f.db.Pool, "ops", authz.RightWrite, "acme", slices.Concat(apptest.AllScopes, []string{authz.ScopeOpsRead}))
	plain := f.principal(t, "plain", authz.RightWrite, "acme")
	// A principal of write sees its own subscriptions: one each.
	f.createSubscription(t, plain, "acme")
	f.createSubscription(t, ops, "acme")
	f.appendEvents(t, plain, "acme", 3)

	b := New(t)
	signIn(f, b, plain)
	b.Do(chromedp.Click(chromedp.ID("nav-lag")), shows(`[data-testid="lag"]`))
	require.Contains(t, text(b, "#consumers-scope"), authz.ScopeOpsRead)
	require.Zero(t, count(b, `[data-testid="consumer-row"]`))
	b.Screenshot("lag-without-ops-read")

	b.Do(chromedp.Click(chromedp.ID("sign-out")), shows("#sign-in-form"))
	signIn(f, b, ops)
	b.Do(chromedp.Click(chromedp.ID("nav-lag")), shows(`[data-testid="consumers"]`))
	want := apiConsumers(t, f, ops)
	require.Contains(t, want, "webhooks")
	require.Contains(t, want, "push")
	require.Equal(t, consumerRow{Cursor: "seq 0", Head: "seq 3", Lag: "3"}, want["webhooks"])
	require.Equal(t, want, pageConsumers(b))
	require.Zero(t, count(b, "#consumers-scope"), "the hint naming the scope")
	require.Equal(t, 1, count(b, `[data-testid="lag-row"]`), "the subscriptions stay")
	b.Screenshot("lag-ops")
}

// apiConsumers is GET /v1/consumers for token, by consumer name.
func apiConsumers(t *testing.T, f *fixture, token string) map[string]consumerRow {
	t.Helper()
	var page struct {
		Consumers []struct {
			Name    string `json:"name"`
			LastSeq int64  `json:"last_seq"`
			Head    int64  `json:"head_seq"`
			Lag     int64  `json:"lag"`
		} `json:"consumers"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/consumers", token, nil, &page))
	rows := map[string]consumerRow{}
	for _, c := range page.Consumers {
		rows[c.Name] = consumerRow{Cursor: fmt.Sprintf("seq %d", c.LastSeq), Head: fmt.Sprintf("seq %d", c.Head), Lag: fmt.Sprint(c.Lag)}
	}
	return rows
}

// pageConsumers is the consumers table of the lag page shown in b, by
// consumer name.
func pageConsumers(b *Browser) map[string]consumerRow {
	cells := Run(b, chromedp.Evaluate[[][]string](`Array.from(
		document.querySelectorAll('[data-testid="consumer-row"]'),
		r => [r.dataset.name].concat(["consumer-last-seq", "consumer-head", "consumer-lag"].map(
			id => r.querySelector('[data-testid="' + id + '"]').innerText)))`))
	rows := map[string]consumerRow{}
	for _, c := range cells {
		rows[c[0]] = consumerRow{Cursor: c[1], Head: c[2], Lag: c[3]}
	}
	return rows
}
