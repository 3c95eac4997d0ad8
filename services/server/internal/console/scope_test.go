package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestConsole_TokenWithoutManageScopeSeesNoSubscription: signed in with a
// token that lacks webhooks:manage, even the owner of a subscription can
// neither see nor act on it, as the API refuses both.
func TestConsole_TokenWithoutManageScopeSeesNoSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusNoContent, "")
	mine := b.createSubscription(t, alice, "acme", rcv.URL+"/alice")
	_, readOnly, err := authz.CreateToken(context.Background(), b.db.Pool,
		&authz.CreateTokenParams{Principal: "alice", Scopes: []string{authz.ScopeEventsRead}})
	require.NoError(t, err)
	br := b.browser(t)
	br.signIn(readOnly)

	for _, path := range []string{"/console/subscriptions/" + mine, "/console/subscriptions/" + mine + "/confirm/delete"} {
		p := br.get(path)
		require.Equal(t, http.StatusForbidden, p.status, path)
		require.NotContains(t, p.text(), rcv.URL+"/alice", path)
	}
	require.NotContains(t, br.get("/console/subscriptions").body, mine, "not listed")
	csrf := br.csrf("/console/subscriptions")
	for _, action := range []string{"disable", "delete"} {
		p := br.post("/console/subscriptions/"+mine+"/"+action, url.Values{"csrf": {csrf}})
		require.Equal(t, http.StatusForbidden, p.status, action)
	}
	require.Equal(t, "active", b.status(t, alice, mine))
}
