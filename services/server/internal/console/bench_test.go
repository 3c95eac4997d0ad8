package console_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// BenchmarkConsole_SubscriptionsPage compares a console page with the API
// call it renders: each iteration gets the subscriptions page (20
// subscriptions) and then the same list from GET /v1/webhooks with the
// bearer token, alternating so both see the same machine load. It reports
// the mean of each and their ratio.
func BenchmarkConsole_SubscriptionsPage(b *testing.B) {
	tb := setup(b)
	token := tb.principal(b, "alice", authz.RightWrite, "acme")
	rcv := newReceiver(b, http.StatusNoContent, "")
	for i := range 20 {
		tb.createSubscription(b, token, "acme", fmt.Sprintf("%s/%d", rcv.URL, i))
	}
	br := tb.browser(b)
	br.signIn(token)
	var page, api time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		p := br.get("/console/subscriptions")
		page += time.Since(start)
		require.Equal(b, http.StatusOK, p.status)
		start = time.Now()
		require.Equal(b, http.StatusOK, tb.api(b, http.MethodGet, "/v1/webhooks", token, nil, nil))
		api += time.Since(start)
	}
	b.ReportMetric(float64(page.Microseconds())/float64(b.N), "µs/page")
	b.ReportMetric(float64(api.Microseconds())/float64(b.N), "µs/api")
	b.ReportMetric(float64(page)/float64(api), "page/api")
}
