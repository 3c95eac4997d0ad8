package consolebrowser

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// portalLink has an admin of space acme issue a portal link for principal
// on acme and returns its URL.
func portalLink(t *testing.T, f *fixture, adminToken, principal string) string {
	t.Helper()
	var link struct {
		URL string `json:"url"`
	}
	status := f.api(t, http.MethodPost, "/v1/portal-links", adminToken, map[string]any{"principal": principal, "space": "acme"}, &link)
	require.Equal(t, http.StatusCreated, status)
	return link.URL
}

// TestConsole_PortalLink opens portal links: each shows its principal's own
// subscriptions on its one space and reaches nothing else, by page or by
// form. The admin's case is the one the API alone does not cover: the API
// lists every subscription of the space to an admin.
func TestConsole_PortalLink(t *testing.T) {
	t.Parallel()
	f := setup(t)
	admin := f.principal(t, "acme-admin", authz.RightAdmin, "acme")
	carol := f.principal(t, "carol", authz.RightWrite, "acme")
	subs := map[string]string{
		"acme-admin": f.createSubscription(t, admin, "acme"),
		"carol":      f.createSubscription(t, carol, "acme"),
		"alice":      f.aliceSub,
		"bob":        f.bobSub,
	}
	b := New(t)

	for _, principal := range []string{"carol", "acme-admin"} {
		t.Run(principal, func(t *testing.T) {
			b := b.For(t)
			own := subs[principal]
			b.Do(chromedp.Navigate(portalLink(t, f, admin, principal)), shows(`[data-testid="subscriptions"]`))
			require.Equal(t, principal, text(b, `[data-testid="principal"]`))
			require.Contains(t, text(b, `[data-testid="portal-banner"]`), "acme")
			require.Equal(t, []string{own}, Run(b, chromedp.Evaluate[[]string](
				`Array.from(document.querySelectorAll('[data-testid="subscription-row"]'), r => r.dataset.id)`)))
			require.Zero(t, count(b, `#nav-push, #sign-out-form`), "a portal session shows webhooks only and has no sign-out")
			b.Screenshot("portal-" + principal)

			b.Do(chromedp.Navigate(f.base+"/console/subscriptions?space=globex"), shows(`[data-testid="subscriptions"]`))
			require.Equal(t, 1, count(b, `[data-testid="subscription-row"]`), "the portal stays on its space")

			b.Do(chromedp.Click(testID("subscription-link")), shows("#subscription-id"))
			require.Equal(t, own, text(b, "#subscription-id"))

			for other, id := range subs {
				if other == principal {
					continue
				}
				b.Do(chromedp.Navigate(f.base + "/console/subscriptions/" + id))
				title := heading(b)
				require.True(t, strings.HasPrefix(title, "404"), "%s's subscription: %s", other, title)
			}
			b.Screenshot("portal-" + principal + "-other-subscription")

			// Not even a form with the session's CSRF token acts on
			// alice's subscription.
			b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+own+"/confirm/disable"), shows("#confirm-submit"))
			code := Run(b, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
				const csrf = document.querySelector('#confirm-form input[name="csrf"]').value;
				const res = await fetch(%q, {method: "POST", body: new URLSearchParams({csrf})});
				return res.status;
			})()`, "/console/subscriptions/"+f.aliceSub+"/disable"), chromedp.EvalAwaitPromise))
			require.Equal(t, http.StatusNotFound, code)
			sub, status := f.subscription(t, f.aliceToken, f.aliceSub)
			require.Equal(t, http.StatusOK, status)
			require.Equal(t, "active", sub.Status)
		})
	}

	// A browser signed in to the console is asked before a portal link
	// ends its session; after a click it shows the portal.
	t.Run("SignedInBrowserIsAskedFirst", func(t *testing.T) {
		b := New(t)
		signIn(f, b, f.aliceToken)
		b.Do(chromedp.Navigate(portalLink(t, f, admin, "carol")), shows("#portal-open"))
		require.Contains(t, text(b, "#portal-question"), "signed in to the console as alice")
		b.Screenshot("portal-confirm")
		b.Do(chromedp.Click(chromedp.ID("portal-open")), shows(`[data-testid="portal-banner"]`))
		require.Equal(t, "carol", text(b, `[data-testid="principal"]`))
	})

	t.Run("TamperedLink", func(t *testing.T) {
		b := b.For(t)
		link := portalLink(t, f, admin, "carol")
		// Change the signature's first character: all six of its bits
		// are signature (the last character's are not).
		dot := strings.LastIndex(link, ".") + 1
		swap := "A"
		if link[dot] == 'A' {
			swap = "B"
		}
		b.Do(chromedp.Navigate(link[:dot] + swap + link[dot+1:]))
		title := heading(b)
		require.True(t, strings.HasPrefix(title, "403"), "a link with a changed signature: %s", title)
		b.Screenshot("portal-tampered")
	})
}
