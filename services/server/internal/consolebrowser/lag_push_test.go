package consolebrowser

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_LagPushAndSignOut goes through the header's links: the lag
// page, the push page with a space's preference switched from the
// console, and signing out.
func TestConsole_LagPushAndSignOut(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)

	b.Do(chromedp.Click(chromedp.ID("nav-lag")), shows(`[data-testid="lag"]`))
	require.Equal(t, []string{f.aliceSub}, Run(b, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('[data-testid="lag-row"]'), r => r.dataset.id)`)))
	require.Equal(t, "0", text(b, `[data-testid="lag-pending"]`))
	b.Screenshot("lag")

	b.Do(chromedp.Click(chromedp.ID("nav-push")), shows(`[data-testid="empty-state"]`))
	b.Do(
		chromedp.SendKeys(chromedp.ID("pref-space"), "acme"),
		chromedp.Click(chromedp.ID("preference-submit")),
		shows(`[data-testid="preference"]`),
	)
	before := preference(t, f)
	want := map[bool]string{true: "on", false: "off"}
	require.Contains(t, text(b, `[data-testid="preference"]`), "are "+want[before])
	b.Do(chromedp.Click(chromedp.ID("preference-toggle")), showsText(`[data-testid="preference"]`, "are "+want[!before]))
	require.Equal(t, !before, preference(t, f))
	b.Screenshot("push")

	b.Do(chromedp.Click(chromedp.ID("sign-out")), shows("#sign-in-form"))
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions"), shows("#sign-in-form"))
	require.Zero(t, count(b, `#principal`), "signed out")
}

// preference is alice's push preference on space acme, as the API has it.
func preference(t *testing.T, f *fixture) bool {
	t.Helper()
	var p struct {
		Notify bool `json:"notify"`
	}
	require.Equal(t, http.StatusOK, f.api(t, http.MethodGet, "/v1/spaces/acme/push-preference", f.aliceToken, nil, &p))
	return p.Notify
}
