package consolebrowser

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// TestConsole_Recover recovers, from the console, the events a subscription
// made after them never got: they are delivered.
func TestConsole_Recover(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var sub struct {
		ID string `json:"id"`
	}
	status := f.api(t, http.MethodPost, "/v1/webhooks", f.aliceToken, map[string]any{"space": "acme", "url": f.receiver.srv.URL + "/late"}, &sub)
	require.Equal(t, http.StatusCreated, status)
	b := New(t)
	signIn(f, b, f.aliceToken)
	openSubscription(f, b, sub.ID)
	require.Zero(t, f.receiver.requests("/late"))
	msg := act(t, b, testID("action-recover"), "recover", nil, func() {
		b.Do(chromedp.SetValue(chromedp.ID("from-seq"), "1"))
	})
	require.Contains(t, msg, "Recovery started: 0 dead deliveries reset, 2 created.")
	require.Eventually(t, func() bool { return f.receiver.requests("/late") == 2 }, 60*time.Second, 20*time.Millisecond)
}
