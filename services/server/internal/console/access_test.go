package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/console/portallink"
)

// maliciousExcerpt is what the receiver answers: markup that runs script
// wherever a page inserts it as HTML instead of text.
const maliciousExcerpt = `<script>alert(1)</script><img src=x onerror=alert(2)>`

// TestConsole_ReceiverAnswersAreEscaped: what a receiver sent is shown as
// text, in the attempts of a delivery and in a test send's result.
func TestConsole_ReceiverAnswersAreEscaped(t *testing.T) {
	t.Parallel()
	b := setup(t, "server.role", "all")
	token := b.principal(t, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(t, http.StatusOK, maliciousExcerpt)
	id := b.createSubscription(t, token, "acme", rcv.URL)
	require.Equal(t, http.StatusCreated, b.api(t, http.MethodPost, "/v1/spaces/acme/events", token,
		map[string]any{"events": []map[string]any{{"type": "item.created", "data": map[string]any{}}}}, nil))
	br := b.browser(t)
	br.signIn(token)

	var p *page
	require.Eventually(t, func() bool {
		p = br.get("/console/subscriptions/" + id + "?status=delivered")
		return p.status == http.StatusOK && strings.Contains(p.body, `data-testid="attempt-row"`)
	}, 30*time.Second, 50*time.Millisecond, "waiting for a delivered attempt")
	requireEscaped(t, p.body)

	csrf := br.csrf("/console/subscriptions/" + id + "/confirm/test")
	p = br.post("/console/subscriptions/"+id+"/test", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, `id="test-result"`)
	requireEscaped(t, p.body)
}

func requireEscaped(t *testing.T, body string) {
	t.Helper()
	require.NotContains(t, body, "<script>alert(1)")
	require.NotContains(t, body, "<img src=x")
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;")
}

// TestConsole_ViewersSeeWhatTheAPILetsThem: a viewer with rights on space
// acme cannot see or act on a subscription of space globex.
func TestConsole_ViewersSeeWhatTheAPILetsThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	alice := b.principal(t, "alice", authz.RightWrite, "acme")
	bob := b.principal(t, "bob", authz.RightAdmin, "globex")
	rcv := newReceiver(t, http.StatusNoContent, "")
	mine := b.createSubscription(t, alice, "acme", rcv.URL+"/alice")
	theirs := b.createSubscription(t, bob, "globex", rcv.URL+"/bob")
	br := b.browser(t)
	br.signIn(alice)

	p := br.get("/console/subscriptions")
	require.Contains(t, p.body, mine)
	require.NotContains(t, p.body, theirs)
	p = br.get("/console/subscriptions?space=globex")
	require.Equal(t, http.StatusForbidden, p.status, "the API's answer for a space without the right")
	require.NotContains(t, p.body, theirs)
	for _, path := range []string{"/console/subscriptions/" + theirs, "/console/subscriptions/" + theirs + "/confirm/delete"} {
		p := br.get(path)
		require.Equal(t, http.StatusNotFound, p.status, path)
		require.NotContains(t, p.text(), rcv.URL+"/bob", path)
	}
	csrf := br.csrf("/console/subscriptions")
	for _, action := range []string{"disable", "delete"} {
		p := br.post("/console/subscriptions/"+theirs+"/"+action, url.Values{"csrf": {csrf}})
		require.Equal(t, http.StatusNotFound, p.status, action)
	}
	require.Equal(t, "active", b.status(t, bob, theirs))
}

// TestConsole_SessionEndsWithItsToken: a revoked token, or a disabled
// principal, ends the session at the next request.
func TestConsole_SessionEndsWithItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, end := range []string{"RevokedToken", "DisabledPrincipal"} {
		t.Run(end, func(t *testing.T) {
			id := "user-" + strings.ToLower(end)
			token := b.principal(t, id, authz.RightWrite, "acme")
			br := b.browser(t)
			br.signIn(token)
			require.Equal(t, http.StatusOK, br.get("/console/subscriptions").status)
			if end == "RevokedToken" {
				subj, err := authz.Authenticate(ctx, b.db.Pool, token)
				require.NoError(t, err)
				require.NoError(t, authz.RevokeToken(ctx, b.db.Pool, subj.TokenID))
			} else {
				require.NoError(t, authz.SetPrincipalDisabled(ctx, b.db.Pool, id, true))
			}
			p := br.get("/console/subscriptions")
			require.Equal(t, http.StatusSeeOther, p.status)
			require.True(t, strings.HasPrefix(p.header.Get("Location"), "/console/sign-in"))
		})
	}
}

// TestConsole_Portal: a portal link opens a session restricted to one
// principal's subscriptions on one space; an expired, tampered or
// foreign-key link is refused.
func TestConsole_Portal(t *testing.T) {
	t.Parallel()
	b := setup(t, "console.frame_ancestors", "https://app.example")
	rcv := newReceiver(t, http.StatusNoContent, "")
	owner := b.principal(t, "owner", authz.RightAdmin, "acme")
	carol := b.principal(t, "carol", authz.RightAdmin, "acme")
	b.grant(t, "carol", authz.RightWrite, "globex")
	ownerSub := b.createSubscription(t, owner, "acme", rcv.URL+"/owner-acme")
	carolSub := b.createSubscription(t, carol, "acme", rcv.URL+"/carol-acme")
	carolElsewhere := b.createSubscription(t, carol, "globex", rcv.URL+"/carol-globex")

	link := b.portalLink(t, owner, "carol", "acme")
	br := b.browser(t)
	p := br.get(link)
	require.Equal(t, http.StatusSeeOther, p.status, p.body)
	require.Contains(t, p.header.Get("Set-Cookie"), "SameSite=Strict")

	t.Run("ShowsThePrincipalsOwnSubscriptionsThere", func(t *testing.T) {
		p := br.get("/console/subscriptions")
		require.Equal(t, http.StatusOK, p.status, p.body)
		require.Contains(t, p.body, carolSub)
		require.NotContains(t, p.body, ownerSub, "another principal's, though carol is an admin of acme")
		require.NotContains(t, p.body, carolElsewhere, "another space")
		require.Contains(t, p.body, `id="portal-banner"`)
		require.Contains(t, p.header.Get("Content-Security-Policy"), "frame-ancestors https://app.example")
	})
	t.Run("CannotOpenOrActOnOthers", func(t *testing.T) {
		csrf := br.csrf("/console/subscriptions/" + carolSub + "/confirm/disable")
		for _, id := range []string{ownerSub, carolElsewhere} {
			require.Equal(t, http.StatusNotFound, br.get("/console/subscriptions/"+id).status)
			require.Equal(t, http.StatusNotFound, br.post("/console/subscriptions/"+id+"/disable", url.Values{"csrf": {csrf}}).status)
		}
		p := br.get("/console/subscriptions?space=globex")
		require.NotContains(t, p.body, carolElsewhere, "a portal session lists its own space whatever the query says")
		require.Equal(t, "active", b.status(t, owner, ownerSub))
		require.Equal(t, "active", b.status(t, carol, carolElsewhere))
		require.Equal(t, http.StatusNotFound, br.get("/console/push").status)
	})
	t.Run("RefusesBadLinks", func(t *testing.T) {
		subj, err := authz.Authenticate(context.Background(), b.db.Pool, owner)
		require.NoError(t, err)
		claims := portallink.Claims{Principal: "carol", Space: "acme", TokenID: subj.TokenID, Expires: time.Now().Add(-time.Second).Unix()}
		valid := claims
		valid.Expires = time.Now().Add(time.Minute).Unix()
		good := portallink.Sign([]byte(consoleKey), &valid)
		otherSpace := valid
		otherSpace.Space = "globex"
		forged := strings.SplitN(portallink.Sign([]byte(consoleKey), &otherSpace), ".", 2)[0] + "." + strings.SplitN(good, ".", 2)[1]
		for name, token := range map[string]string{
			"Expired":     portallink.Sign([]byte(consoleKey), &claims),
			"Tampered":    forged,
			"OtherKey":    portallink.Sign([]byte("another-key-of-thirty-two-bytes-or-more"), &valid),
			"Truncated":   good[:len(good)-3],
			"NotAToken":   "nonsense",
			"MissingPart": strings.SplitN(good, ".", 2)[0],
		} {
			p := b.browser(t).get("/console/portal?" + url.Values{"token": {token}}.Encode())
			require.Equal(t, http.StatusForbidden, p.status, name)
			require.Empty(t, p.header.Get("Set-Cookie"), name)
		}
		p := b.browser(t).get("/console/portal?" + url.Values{"token": {good}}.Encode())
		require.Equal(t, http.StatusSeeOther, p.status, "the untouched link still opens")
	})
	t.Run("EndsWhenTheIssuingTokenIsRevoked", func(t *testing.T) {
		subj, err := authz.Authenticate(context.Background(), b.db.Pool, owner)
		require.NoError(t, err)
		require.NoError(t, authz.RevokeToken(context.Background(), b.db.Pool, subj.TokenID))
		require.Equal(t, http.StatusSeeOther, br.get("/console/subscriptions").status)
	})
}

// TestConsole_PortalOfAnAdminListsItsOwn: a portal session of a space admin
// lists that principal's own subscriptions, even when a full page of other
// owners' subscriptions on the space comes first, and no page cursor names
// another owner's subscription.
func TestConsole_PortalOfAnAdminListsItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, http.StatusNoContent, "")
	other := b.principal(t, "other", authz.RightAdmin, "acme")
	dora := b.principal(t, "dora", authz.RightAdmin, "acme")
	for i := range 50 { // a full page of the API's default size
		b.createSubscription(t, other, "acme", fmt.Sprintf("%s/other-%d", rcv.URL, i))
	}
	own := b.createSubscription(t, dora, "acme", rcv.URL+"/dora")
	link := b.portalLink(t, dora, "dora", "acme")
	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.get(link).status)
	p := br.get("/console/subscriptions")
	require.Equal(t, http.StatusOK, p.status, p.body)
	require.Contains(t, p.body, own)
	require.NotContains(t, p.body, `id="next-page"`)
}

// TestConsole_PortalEndsWithTheIssuersAdminRight: a portal link an admin
// issued for another principal opens a session that ends as soon as the
// issuer is no longer an admin of the space.
func TestConsole_PortalEndsWithTheIssuersAdminRight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv := newReceiver(t, http.StatusNoContent, "")
	admin := b.principal(t, "admin", authz.RightAdmin, "acme")
	erin := b.principal(t, "erin", authz.RightWrite, "acme")
	b.createSubscription(t, erin, "acme", rcv.URL+"/erin")
	link := b.portalLink(t, admin, "erin", "acme")
	br := b.browser(t)
	require.Equal(t, http.StatusSeeOther, br.get(link).status)
	require.Equal(t, http.StatusOK, br.get("/console/subscriptions").status)

	b.grant(t, "admin", authz.RightWrite, "acme") // no longer an admin
	p := br.get("/console/subscriptions")
	require.Equal(t, http.StatusSeeOther, p.status, "the session outlived its issuer's right: %s", p.body)
}
