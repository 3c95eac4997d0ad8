package console_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// TestConsole_Actions: each action is asked on a confirmation page and
// done through the API.
func TestConsole_Actions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusNoContent, "")
	id := b.createSubscription(t, token, "acme", rcv.URL)
	br := b.browser(t)
	br.signIn(token)
	base := "/console/subscriptions/" + id

	act := func(t *testing.T, action string, form url.Values) *page {
		t.Helper()
		confirm := br.get(base + "/confirm/" + action)
		require.Equal(t, http.StatusOK, confirm.status, confirm.body)
		require.Contains(t, confirm.body, `id="confirm-form"`)
		require.Contains(t, confirm.body, `action="`+base+"/"+action+`"`)
		form.Set("csrf", br.csrf(base+"/confirm/"+action))
		return br.post(base+"/"+action, form)
	}
	t.Run("DisableAndEnable", func(t *testing.T) {
		require.Equal(t, http.StatusOK, act(t, "disable", url.Values{"reason": {"maintenance"}}).status)
		require.Equal(t, "disabled", b.status(t, token, id))
		require.Contains(t, br.get(base).body, `data-testid="action-enable"`)
		p := act(t, "enable", url.Values{"from": {"head"}})
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Equal(t, "active", b.status(t, token, id))
	})
	t.Run("RotateSecretShowsTheNewOneOnce", func(t *testing.T) {
		p := act(t, "rotate-secret", url.Values{})
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Regexp(t, regexp.MustCompile(`id="new-secret" data-testid="new-secret">whsec_`), p.body)
		require.NotContains(t, br.get(base).body, "whsec_")
	})
	t.Run("TestSend", func(t *testing.T) {
		p := act(t, "test", url.Values{})
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Contains(t, p.body, "HTTP 204")
	})
	t.Run("AnAPIRefusalIsShown", func(t *testing.T) {
		p := act(t, "rotate-secret", url.Values{})
		require.Equal(t, http.StatusConflict, p.status, "the previous secret still signs")
		require.Contains(t, p.body, `id="error-detail"`)
	})
	t.Run("Delete", func(t *testing.T) {
		p := act(t, "delete", url.Values{})
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Equal(t, http.StatusNotFound, b.api(t, http.MethodGet, "/v1/webhooks/"+id, token, nil, nil))
		require.Contains(t, br.get("/console/subscriptions").body, `id="empty-subscriptions"`)
	})
}

// TestConsole_ListsArePaged: the subscriptions list follows the API's
// cursor.
func TestConsole_ListsArePaged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusNoContent, "")
	const n = 52
	for i := range n {
		b.createSubscription(t, token, "acme", fmt.Sprintf("%s/%d", rcv.URL, i))
	}
	br := b.browser(t)
	br.signIn(token)
	next := regexp.MustCompile(`id="next-page" href="([^"]+)"`)
	seen, path := 0, "/console/subscriptions"
	for pages := 0; path != ""; pages++ {
		require.Less(t, pages, 5)
		p := br.get(path)
		require.Equal(t, http.StatusOK, p.status, p.body)
		seen += strings.Count(p.body, `data-testid="subscription-row"`)
		path = ""
		if m := next.FindStringSubmatch(p.body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	require.Equal(t, n, seen)
}
