package push_test

import (
	"context"
	"net/http"
	gosync "sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// startTimes records when each push request starts, on the sending side:
// the moment the worker hands it to its HTTP client, before the network.
type startTimes struct {
	next http.RoundTripper
	mu   gosync.Mutex
	at   []time.Time
}

func (s *startTimes) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now()
	s.mu.Lock()
	s.at = append(s.at, now)
	s.mu.Unlock()
	return s.next.RoundTrip(req)
}

func (s *startTimes) all() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// TestDeliver_RevokeStopsSendsWithinTheBound: bob loses his right on the
// space while a backlog of messages to his devices drains, in jobs that
// run for well over the bound. No request starts later than
// push.rights_max_age after the revocation committed; the rest of the
// backlog is not sent. Reusing the batch's first decision for the whole
// job, requests go on until the jobs end.
func TestDeliver_RevokeStopsSendsWithinTheBound(t *testing.T) {
	t.Parallel()
	const bound, devices, events = 200 * time.Millisecond, 10, 60
	starts := &startTimes{next: http.DefaultTransport.(*http.Transport).Clone()}
	b := setup(t, &setupOpts{
		// A push service that takes a few milliseconds per message, as one
		// across a network does, so the backlog drains for seconds.
		respond: func(string) pushtest.Response { time.Sleep(5 * time.Millisecond); return pushtest.Response{} },
		deliverCfg: func(c *push.DeliverConfig) {
			c.RightsMaxAge, c.OriginConcurrency, c.Transport = bound, 2, starts
		},
	})
	ctx := context.Background()
	b.member(t, "alice", "s1", authz.RightWrite)
	b.member(t, "bob", "s1", authz.RightRead)
	for i := range devices {
		b.device(t, "bob", "bob-"+string(rune('a'+i)))
	}
	for range events {
		b.write(t, "s1", "alice")
	}
	require.Equal(t, 2, b.round(t).Jobs, "600 messages, 500 a job")
	b.start(t)

	testwait.Until(t, 30*time.Second, func() bool { return len(b.rcv.Messages()) >= 50 }, "the backlog drains")
	require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "bob"))
	revoked := time.Now() // after the commit
	b.waitJobs(t, 2, "completed", "cancelled")

	var late []time.Duration
	all := starts.all()
	for _, at := range all {
		if at.After(revoked.Add(bound)) {
			late = append(late, at.Sub(revoked))
		}
	}
	sent := len(b.rcv.Messages())
	t.Logf("%d of %d messages sent; %d requests, the last %s after the revocation", sent, devices*events, len(all), all[len(all)-1].Sub(revoked))
	require.Empty(t, late, "%d requests started more than %s after the revocation committed, the first %s after", len(late), bound, late[:min(1, len(late))])
	require.Less(t, sent, devices*events, "the revocation stopped the backlog")
	require.Empty(t, b.rcv.Errors())
}
