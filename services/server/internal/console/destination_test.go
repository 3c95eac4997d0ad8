package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestConsole_BrokerDestination: a subscription to a broker shows its kind
// and its fields with the password masked, in the list and on its page,
// and an edit that leaves the URL empty keeps the destination.
func TestConsole_BrokerDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	var sub struct {
		ID string `json:"id"`
	}
	status := b.api(t, http.MethodPost, "/v1/webhooks", token, map[string]any{"space": "acme", "destination": map[string]any{
		"kind": "rabbitmq", "url": "amqp://bob:s3cret-pw@127.0.0.1:5672/prod", "exchange": "events"}}, &sub)
	require.Equal(t, http.StatusCreated, status)
	br := b.browser(t)
	br.signIn(token)

	list := br.get("/console/subscriptions")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.text(), "rabbitmq amqp://bob:********@127.0.0.1:5672/prod")
	require.NotContains(t, list.body, "s3cret-pw")

	p := br.get("/console/subscriptions/" + sub.ID)
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.text(), `id="subscription-destination" data-testid="subscription-destination">rabbitmq`)
	require.Contains(t, p.text(), "exchange: events")
	require.Contains(t, p.text(), "url: amqp://bob:********@127.0.0.1:5672/prod")
	require.NotContains(t, p.body, "s3cret-pw")

	edit := "/console/subscriptions/" + sub.ID + "/edit"
	form := url.Values{"csrf": {br.csrf(edit)}, "url": {""}, "event_types": {"item.*"}, "policy": {"ordered"}}
	res := br.post(edit, form)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	var after struct {
		EventTypes  []string       `json:"event_types"`
		Destination map[string]any `json:"destination"`
	}
	require.Equal(t, http.StatusOK, b.api(t, http.MethodGet, "/v1/webhooks/"+sub.ID, token, nil, &after))
	require.Equal(t, []string{"item.*"}, after.EventTypes)
	require.Equal(t, "rabbitmq", after.Destination["kind"], "the edit kept the broker destination")
}
