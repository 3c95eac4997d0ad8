package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLease_OutlastsALinger: the lease a step takes outlasts the longest
// linger that may follow it, as well as an attempt, so that the rounds
// wake a lingering sender instead of inserting a job for its subscription.
func TestLease_OutlastsALinger(t *testing.T) {
	for _, c := range []DeliverConfig{
		{},
		{Linger: time.Minute, Timeout: 100 * time.Millisecond},
		{Linger: time.Millisecond, Timeout: 2 * time.Minute},
	} {
		cfg := c.withDefaults()
		require.Greater(t, cfg.lease(), cfg.Linger, "%+v", c)
		require.Greater(t, cfg.lease(), cfg.Timeout, "%+v", c)
	}
}
