package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

func TestConsole_SignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusNoContent, "")
	id := b.createSubscription(t, token, "acme", rcv.URL+"/hook")

	t.Run("SetsAnHttpOnlyStrictCookie", func(t *testing.T) {
		br := b.browser(t)
		p := br.signIn(token)
		ck := p.header.Get("Set-Cookie")
		require.Contains(t, ck, "bothy_console=")
		require.Contains(t, ck, "HttpOnly")
		require.Contains(t, ck, "SameSite=Strict")
		require.Contains(t, ck, "Path=/console/")
		require.NotContains(t, ck, "Secure", "plain HTTP: a Secure cookie would not come back")
	})
	t.Run("ListsTheSubscriptions", func(t *testing.T) {
		br := b.browser(t)
		br.signIn(token)
		p := br.get("/console/subscriptions")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Contains(t, p.body, `data-id="`+id+`"`)
		require.Contains(t, p.text(), rcv.URL+"/hook")
	})
	t.Run("RefusesABadToken", func(t *testing.T) {
		br := b.browser(t)
		p := br.post("/console/sign-in", map[string][]string{"token": {"bothy_nonsense"}})
		require.Equal(t, http.StatusUnauthorized, p.status)
		require.Contains(t, p.body, `id="sign-in-error"`)
		require.Empty(t, p.header.Get("Set-Cookie"))
	})
	t.Run("ReturnsToTheConsolePageAskedFor", func(t *testing.T) {
		for next, want := range map[string]string{
			"/console/lag":                  "/console/lag",
			"https://evil.example/console/": "/console/subscriptions",
			"//evil.example/console/":       "/console/subscriptions",
			"/console/../v1/webhooks":       "/console/subscriptions",
		} {
			p := b.browser(t).post("/console/sign-in", url.Values{"token": {token}, "next": {next}})
			require.Equal(t, http.StatusSeeOther, p.status, next)
			require.Equal(t, want, p.header.Get("Location"), next)
		}
	})
	t.Run("TheCookieIsNoCredentialOfTheAPI", func(t *testing.T) {
		p := b.browser(t).signIn(token)
		req, err := http.NewRequest(http.MethodGet, b.base+"/v1/webhooks", nil)
		require.NoError(t, err)
		for _, ck := range p.header.Values("Set-Cookie") {
			name, rest, _ := strings.Cut(ck, "=")
			value, _, _ := strings.Cut(rest, ";")
			req.AddCookie(&http.Cookie{Name: name, Value: value})
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	})
	t.Run("SendsTheUnsignedToSignIn", func(t *testing.T) {
		p := b.browser(t).get("/console/subscriptions")
		require.Equal(t, http.StatusSeeOther, p.status)
		require.True(t, strings.HasPrefix(p.header.Get("Location"), "/console/sign-in"))
	})
}

func TestConsole_Push(t *testing.T) {
	t.Parallel()
	b := setup(t)
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	br := b.browser(t)
	br.signIn(token)

	p := br.get("/console/push")
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `id="empty-registrations"`)

	p = br.get("/console/push?space=acme")
	require.Contains(t, p.body, "Notifications for space acme are on")
	csrf := br.csrf("/console/push?space=acme")
	p = br.post("/console/push/preference", map[string][]string{"csrf": {csrf}, "space": {"acme"}, "notify": {"false"}})
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, br.get("/console/push?space=acme").body, "Notifications for space acme are off")

	noPush := b.principal(t, "bob", authz.RightWrite, "acme", authz.ScopeWebhooksManage)
	br = b.browser(t)
	br.signIn(noPush)
	p = br.get("/console/push")
	require.Equal(t, http.StatusOK, p.status)
	require.Contains(t, p.body, `id="push-problem"`, "the API's refusal, said on the page")
}
