package consolebrowser

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_Recover recovers, from the console, the events a subscription
// made after them never got: the API refuses a range from before the
// subscription's creation unless the form's box says so, and then they are
// delivered.
func TestConsole_Recover(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var sub struct {
		ID string `json:"id"`
	}
	status := f.api(t, http.MethodPost, "/v1/webhooks", f.aliceToken, map[string]any{"space": "acme", "url": f.receiver.srv.Base() + "/late"}, &sub)
	require.Equal(t, http.StatusCreated, status)
	b := New(t)
	signIn(f, b, f.aliceToken)
	openSubscription(f, b, sub.ID)
	require.Zero(t, f.receiver.requests("/late"))
	// From seq 1, before the subscription's creation, only when the form
	// says so.
	b.Do(chromedp.Click(testID("action-recover")), shows("#confirm-submit"),
		chromedp.SetValue(chromedp.ID("from-seq"), "1"), chromedp.Click(chromedp.ID("confirm-submit")), shows("#error-detail"))
	require.Contains(t, text(b, "#error-detail"), "before_creation")
	require.Zero(t, f.receiver.requests("/late"))
	openSubscription(f, b, sub.ID)
	msg := act(t, b, testID("action-recover"), "recover", nil, func() {
		b.Do(chromedp.SetValue(chromedp.ID("from-seq"), "1"), chromedp.Click(chromedp.ID("before-creation")))
	})
	require.Contains(t, msg, "Recovery started: 0 dead deliveries reset, 2 created.")
	require.Eventually(t, func() bool { return f.receiver.requests("/late") == 2 }, 60*time.Second, 20*time.Millisecond)
}
