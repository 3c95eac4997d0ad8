package delivery_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

// TestDelivery_RevokeStopsRequestsWithinTheBound: the owner's right is
// revoked while a backlog of 10,000 events drains to a receiver that takes
// a few milliseconds per request, so that one batch of requests lasts
// longer than webhooks.rights_max_age. No request may start later than
// the bound after the revocation committed: each attempt's start
// (attempted_at, taken by the sender right before the request) is compared
// with the time the revoke had returned, which is after its commit. The
// rest of the backlog is dead without a request.
func TestDelivery_RevokeStopsRequestsWithinTheBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy *webhooks.PolicyParams
		delay  time.Duration
	}{
		{"Ordered", nil, 5 * time.Millisecond},
		// Slower than the ordered receiver: a request the gate admitted must
		// start then, not once one of the four in flight has ended.
		{"Unordered", &webhooks.PolicyParams{Name: new(webhooks.PolicyUnordered), MaxInFlight: new(4)}, 80 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := fastRetries()
			cfg.RightsMaxAge = 100 * time.Millisecond
			b := setup(t, cfg)
			// A slow receiver: the delay is its work, not a synchronisation.
			url, rv := recvtest.Endpoint(t, webhookstest.Always(webhookstest.Answer{Status: http.StatusNoContent, Delay: tc.delay}))
			s, _ := b.subscribe(t, &webhooks.CreateParams{URL: url, Policy: tc.policy})
			b.emit(t, "s1", 10_000)
			b.round(t)
			b.start(t)

			testwait.Until(t, 30*time.Second, func() bool { return int64(rv.Count()) >= 350 }, "350 requests, mid-batch")
			ctx := context.Background()
			require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
			revoked := time.Now() // after the commit
			testwait.Until(t, 60*time.Second, func() bool { return b.pending(t, s.ID) == 0 }, "the backlog ended")

			var lastStart time.Time
			var sent, refused int
			require.NoError(t, b.db.Pool.QueryRow(ctx, `
SELECT max(attempted_at) FILTER (WHERE status_code IS NOT NULL), count(*) FILTER (WHERE status_code IS NOT NULL),
       count(*) FILTER (WHERE error LIKE 'not allowed%')
FROM webhook_attempts WHERE subscription_id = $1`, s.ID).Scan(&lastStart, &sent, &refused))
			t.Logf("%d requests, the last started %s after the revoke returned; %d refused without a request",
				sent, lastStart.Sub(revoked), refused)
			require.False(t, lastStart.After(revoked.Add(cfg.RightsMaxAge)),
				"a request started %s after the revoke, the bound is %s", lastStart.Sub(revoked), cfg.RightsMaxAge)
			require.Positive(t, refused, "the rest of the backlog is dead without a request")
			require.Equal(t, 10_000, sent+refused)
		})
	}
}
