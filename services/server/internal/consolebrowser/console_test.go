package consolebrowser

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// testID selects the first element with a data-testid.
func testID(id string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + id + `"]`) }

// count returns how many elements match a CSS selector.
func count(b *Browser, css string) int {
	return Run(b, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
}

// shows waits until a page that has an element matching css has loaded.
// It fails at once, with the error's text, when the page is the console's
// error page instead, so a refused action does not wait out the step's
// timeout.
func shows(css string) chromedp.Action[chromedp.Void] {
	return showsWhere(css, fmt.Sprintf(`document.querySelector(%q)`, css))
}

// showsText is shows for an element whose text contains want.
func showsText(css, want string) chromedp.Action[chromedp.Void] {
	return showsWhere(fmt.Sprintf("%s with %q", css, want),
		fmt.Sprintf(`(document.querySelector(%q)?.innerText ?? "").includes(%q)`, css, want))
}

// showsWhere waits until a loaded page makes the JavaScript condition
// true; what names it in errors.
func showsWhere(what, condition string) chromedp.Action[chromedp.Void] {
	check := chromedp.Evaluate[string](fmt.Sprintf(`document.readyState !== "complete" ? ""
		: (%s) ? "found"
		: document.querySelector("#error-detail") ? document.querySelector("main").innerText : ""`, condition))
	return func(ctx context.Context, tgt *chromedp.Target) (chromedp.Void, error) {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			// An evaluation fails while the page is being replaced; the
			// next tick looks at the new one.
			got, err := check(ctx, tgt)
			if err == nil && got == "found" {
				return chromedp.Void{}, nil
			}
			if err == nil && got != "" {
				return chromedp.Void{}, fmt.Errorf("waiting for %s, got the error page: %s", what, got)
			}
			select {
			case <-ctx.Done():
				return chromedp.Void{}, fmt.Errorf("waiting for %s: %w", what, ctx.Err())
			case <-tick.C:
			}
		}
	}
}

// heading waits for a console page (every one has a heading in main)
// and returns its heading: the error pages' is "STATUS Text".
func heading(b *Browser) string {
	b.Do(shows("main h1"))
	return text(b, "main h1")
}

// text is the text of the first element matching css, as shown
// (innerText). It reads through JavaScript rather than DOM node ids, which
// go stale when a page replaces its document.
func text(b *Browser, css string) string {
	return Run(b, chromedp.Evaluate[string](fmt.Sprintf(`(() => {
		const css = %q;
		const e = document.querySelector(css);
		if (!e) throw new Error("no element matches " + css);
		return e.innerText;
	})()`, css)))
}

// signIn signs b in to the console with a bearer token through the sign-in
// form and waits for the subscriptions page.
func signIn(f *fixture, b *Browser, token string) {
	b.Do(
		chromedp.Navigate(f.base+"/console/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("sign-in-submit")),
		shows("#principal"),
	)
}

// openSubscription shows subscription id's page and waits for it.
func openSubscription(f *fixture, b *Browser, id string) {
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+id), shows("#subscription-status"))
}

// noScriptRan checks that nothing of the page's data became markup: no
// dialog opened, and the page has no element that only the malicious
// excerpt could have brought (the page's CSP would keep an injected inline
// script from running, so the elements are the check that counts).
func noScriptRan(t *testing.T, b *Browser) {
	t.Helper()
	require.Empty(t, b.Dialogs(), "a page opened a dialog")
	require.Zero(t, count(b, `main script, main img, [onerror]`), "the excerpt became markup")
}

func TestConsole_SignInListAndDrillDown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)

	// A page of the console sends a browser without a session to sign in.
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions"), chromedp.WaitVisible(chromedp.ID("token")))
	b.Screenshot("sign-in")

	b.Do(
		chromedp.SendKeys(chromedp.ID("token"), "not-a-token"),
		chromedp.Click(chromedp.ID("sign-in-submit")),
		shows(`[data-testid="sign-in-error"]`),
	)
	b.Screenshot("sign-in-refused")

	b.Do(
		chromedp.SendKeys(chromedp.ID("token"), f.aliceToken),
		chromedp.Click(chromedp.ID("sign-in-submit")),
		shows(`[data-testid="subscriptions"]`),
	)
	require.Equal(t, "alice", text(b, `[data-testid="principal"]`))
	// alice sees her subscription and not bob's, on another space.
	require.Equal(t, 1, count(b, `[data-testid="subscription-row"]`))
	require.Equal(t, f.aliceSub, Run(b, chromedp.Evaluate[string](`document.querySelector('[data-testid="subscription-row"]').dataset.id`)))
	require.Equal(t, "active", text(b, `[data-testid="subscription-status"]`))
	b.Screenshot("subscriptions")

	// Drill down: the subscription's deliveries with their attempts.
	b.Do(chromedp.Click(testID("subscription-link")), shows(`[data-testid="deliveries"]`))
	require.Equal(t, f.aliceSub, text(b, "#subscription-id"))
	require.Equal(t, 2, count(b, `[data-testid="delivery-row"]`))
	require.Equal(t, 2, count(b, `[data-testid="attempt-row"]`))
	require.Equal(t, "delivered", text(b, `[data-testid="delivery-status"]`))
	require.Equal(t, "HTTP 200", text(b, `[data-testid="attempt-status"]`))

	// The receiver's answer is shown as text, and nothing of it ran.
	excerpts := Run(b, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll('[data-testid="response-excerpt"]'), e => e.innerText)`))
	require.Equal(t, []string{maliciousExcerpt, maliciousExcerpt}, excerpts)
	require.Contains(t, Run(b, chromedp.Evaluate[string](`document.body.innerText`)), maliciousExcerpt)
	noScriptRan(t, b)
	b.Screenshot("subscription")
}

// act does action on the subscription shown in b: it follows the action's
// link, checks that the confirmation page changed nothing yet (before
// runs then), fills the form (fill, if not nil), confirms and returns the
// result page's message.
func act(t *testing.T, b *Browser, link chromedp.CSS, name string, before, fill func()) string {
	t.Helper()
	b.Do(chromedp.Click(link), shows("#confirm-submit"))
	b.Screenshot("confirm-" + name)
	if before != nil {
		before()
	}
	if fill != nil {
		fill()
	}
	b.Do(chromedp.Click(chromedp.ID("confirm-submit")), shows(`[data-testid="result-message"]`))
	b.Screenshot("result-" + name)
	return text(b, `[data-testid="result-message"]`)
}

func TestConsole_Actions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)
	status := func(t *testing.T) string {
		sub, code := f.subscription(t, f.aliceToken, f.aliceSub)
		require.Equal(t, http.StatusOK, code)
		return sub.Status
	}

	t.Run("DisableAndEnable", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		msg := act(t, b, testID("action-disable"), "disable",
			func() { require.Equal(t, "active", status(t), "the confirmation page changed nothing") },
			func() { b.Do(chromedp.SendKeys(chromedp.ID("reason"), "receiver maintenance")) })
		require.Contains(t, msg, "Disabled")
		require.Equal(t, "disabled", status(t))

		openSubscription(f, b, f.aliceSub)
		require.Contains(t, text(b, "#subscription-status"), "disabled (manual")
		msg = act(t, b, testID("action-enable"), "enable",
			func() { require.Equal(t, "disabled", status(t), "the confirmation page changed nothing") }, nil)
		require.Contains(t, msg, "Enabled from the head")
		require.Equal(t, "active", status(t))
	})

	t.Run("RotateSecret", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		msg := act(t, b, testID("action-rotate-secret"), "rotate-secret", nil, nil)
		require.Contains(t, msg, "rotated")
		require.True(t, strings.HasPrefix(text(b, `[data-testid="new-secret"]`), "whsec_"))
	})

	t.Run("Resend", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		seq := Run(b, chromedp.Evaluate[string](`document.querySelector('[data-testid="delivery-row"]').dataset.seq`))
		before := f.receiver.requests("/acme")
		msg := act(t, b, testID("action-resend"), "resend",
			func() { require.Equal(t, before, f.receiver.requests("/acme"), "the confirmation page sent nothing") }, nil)
		require.Equal(t, "Delivery "+seq+" is queued to be sent again.", msg)
		require.Eventually(t, func() bool { return f.receiver.requests("/acme") > before }, 60*time.Second, 20*time.Millisecond,
			"the delivery is sent again")
		b.Do(chromedp.Navigate(f.base+"/console/subscriptions/"+f.aliceSub+"/deliveries/"+seq), shows("#delivery-resent"))
	})

	t.Run("TestSend", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		before := f.receiver.requests("/acme")
		msg := act(t, b, testID("action-test"), "test",
			func() { require.Equal(t, before, f.receiver.requests("/acme"), "the confirmation page sent nothing") }, nil)
		require.Equal(t, "Test message sent.", msg)
		require.Equal(t, before+1, f.receiver.requests("/acme"))
		require.Equal(t, "HTTP 200", text(b, `[data-testid="test-status"]`))
		require.Equal(t, maliciousExcerpt, text(b, `[data-testid="response-excerpt"]`))
		noScriptRan(t, b)
	})

	t.Run("CancelDeleteKeepsIt", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		b.Do(chromedp.Click(testID("action-delete")), shows("#confirm-cancel"))
		b.Do(chromedp.Click(chromedp.ID("confirm-cancel")), shows(`[data-testid="deliveries"]`))
		require.Equal(t, "active", status(t))
	})

	t.Run("Delete", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		msg := act(t, b, testID("action-delete"), "delete",
			func() { require.Equal(t, "active", status(t), "the confirmation page changed nothing") }, nil)
		require.Contains(t, msg, "deleted")
		_, code := f.subscription(t, f.aliceToken, f.aliceSub)
		require.Equal(t, http.StatusNotFound, code)
		b.Do(chromedp.Click(chromedp.ID("result-back")), shows(`[data-testid="empty-state"]`))
	})
	noScriptRan(t, b)
}

// attackerPage serves, from another origin, a page that submits a form to
// the console as soon as it loads.
func attackerPage(t *testing.T, action string, fields map[string]string) *httptest.Server {
	t.Helper()
	var inputs strings.Builder
	for k, v := range fields {
		fmt.Fprintf(&inputs, `<input type="hidden" name="%s" value="%s">`, k, v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>free prizes</title><form id="f" method="post" action="%s">%s</form>`+
			`<script>document.getElementById("f").submit()</script>`, action, inputs.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestConsole_CSRFIsRefused posts forged forms to the console. The console
// has three defences: the session cookie is SameSite=Strict, a POST must
// come from the console's origin, and it must carry the session's CSRF
// token. Some cases leave only one of them to refuse the form, so each
// defence is seen to work on its own.
func TestConsole_CSRFIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	// The console's own forms send its origin, not "null": with its
	// Referrer-Policy the origin check does not depend on the browser
	// sending Fetch Metadata (Sec-Fetch-Site), which older ones do not.
	origins := recordPostOrigins(t, b)
	signIn(f, b, f.aliceToken)
	require.Eventually(t, func() bool { return origins()[f.base+"/console/sign-in"] != "" }, 60*time.Second, 10*time.Millisecond,
		"the sign-in POST was not seen")
	require.Equal(t, f.base, origins()[f.base+"/console/sign-in"], "Origin of the sign-in form's POST")
	sessionCSRF := Run(b, chromedp.Evaluate[string](`document.querySelector('#sign-out-form input[name="csrf"]').value`))
	require.NotEmpty(t, sessionCSRF)

	action := f.base + "/console/subscriptions/" + f.aliceSub + "/disable"

	// Only the CSRF token stands between a form posted from the console's
	// own origin (a script injected into a page, say) and the action.
	t.Run("SameOriginWithoutTheToken", func(t *testing.T) {
		b := b.For(t)
		openSubscription(f, b, f.aliceSub)
		code := Run(b, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
			const res = await fetch(%q, {method: "POST", body: new URLSearchParams({csrf: "forged", reason: "pwned"})});
			return res.status;
		})()`, action), chromedp.EvalAwaitPromise))
		require.Equal(t, http.StatusForbidden, code)
		sub, status := f.subscription(t, f.aliceToken, f.aliceSub)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "active", sub.Status, "the forged form changed nothing")
	})

	for _, tc := range []struct {
		name string
		// host the attacker's page is served from: 127.0.0.1 on another
		// port is another origin of the same site (the session cookie is
		// sent along); localhost is another site (it is not).
		host string
		csrf string
	}{
		{name: "OtherOriginSameSite", host: "127.0.0.1", csrf: "forged"},
		// Only the origin check stands between a leaked token and the
		// action.
		{name: "OtherOriginWithTheSessionsToken", host: "127.0.0.1", csrf: sessionCSRF},
		// Last: the console answers a POST without its cookie by clearing
		// the cookie, which signs the browser out.
		{name: "OtherSite", host: "localhost", csrf: "forged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := b.For(t)
			evil := attackerPage(t, action, map[string]string{"csrf": tc.csrf, "reason": "pwned"})
			u := strings.Replace(evil.URL, "127.0.0.1", tc.host, 1)
			b.Do(chromedp.Navigate(u))
			title := heading(b) // the console's answer to the form
			require.Equal(t, action, b.Location(), "the form was submitted to the console")
			require.True(t, strings.HasPrefix(title, "403"), "the console answered %q", title)
			b.Screenshot("csrf-refused-" + tc.name)
			sub, code := f.subscription(t, f.aliceToken, f.aliceSub)
			require.Equal(t, http.StatusOK, code)
			require.Equal(t, "active", sub.Status, "the forged form changed nothing")
		})
	}

}

func TestConsole_OtherSpaceIsNotReachable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	b := New(t)
	signIn(f, b, f.aliceToken)

	for _, path := range []string{
		"/console/subscriptions/" + f.bobSub,
		"/console/subscriptions/" + f.bobSub + "/confirm/delete",
	} {
		b.Do(chromedp.Navigate(f.base + path))
		title := heading(b)
		require.True(t, strings.HasPrefix(title, "404") || strings.HasPrefix(title, "403"), "%s: %s", path, title)
	}
	b.Screenshot("other-space")

	// Not even a form with the session's own CSRF token reaches it.
	code := Run(b, chromedp.Evaluate[int](fmt.Sprintf(`(async () => {
		const csrf = document.querySelector('#sign-out-form input[name="csrf"]').value;
		const res = await fetch(%q, {method: "POST", body: new URLSearchParams({csrf})});
		return res.status;
	})()`, "/console/subscriptions/"+f.bobSub+"/delete"), chromedp.EvalAwaitPromise))
	require.Contains(t, []int{http.StatusNotFound, http.StatusForbidden}, code)
	_, status := f.subscription(t, f.bobToken, f.bobSub)
	require.Equal(t, http.StatusOK, status, "bob's subscription is still there")

	// Nor does the list show it when asked for bob's space.
	b.Do(chromedp.Navigate(f.base+"/console/subscriptions?space=globex"), chromedp.WaitVisible(chromedp.ID("main")))
	require.Zero(t, count(b, `[data-testid="subscription-row"]`))
}

// recordPostOrigins records, from now on, the Origin header of every POST
// the tab sends, by URL; the function it returns reads them. A POST sent
// without Origin is recorded as "(none)".
func recordPostOrigins(t *testing.T, b *Browser) func() map[string]string {
	t.Helper()
	var mu gosync.Mutex
	origins := map[string]string{}
	ctx, cancel := context.WithCancel(b.Context())
	t.Cleanup(cancel)
	events := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range events {
			if err != nil {
				return // the tab is gone
			}
			if ev.Request.Method != http.MethodPost {
				continue
			}
			o, _ := ev.Request.Headers["Origin"].(string)
			if o == "" {
				o = "(none)"
			}
			mu.Lock()
			origins[ev.Request.URL] = o
			mu.Unlock()
		}
	}()
	_, err := chromedp.Call(b.Context(), network.Enable, network.EnableParams{})
	require.NoError(t, err)
	return func() map[string]string {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(origins)
	}
}
