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

// TestMaxRun_DefaultStaysUnderTheRescue: by default a job runs as long as
// River's rescue of stuck jobs allows, its timeout included, at most a
// minute and at least a slice; an explicit MaxRun is kept.
func TestMaxRun_DefaultStaysUnderTheRescue(t *testing.T) {
	timeout := func(cfg DeliverConfig) time.Duration { return (&Deliverer{cfg: cfg}).Timeout(nil) }

	cfg := (&DeliverConfig{}).withDefaults()
	require.Equal(t, 2*time.Minute, cfg.RescueAfter)
	require.Equal(t, time.Minute, cfg.MaxRun, "a minute under the default rescue")
	require.Less(t, timeout(cfg), cfg.RescueAfter)

	cfg = (&DeliverConfig{RescueAfter: 90 * time.Second}).withDefaults()
	require.Equal(t, 33*time.Second, cfg.MaxRun, "what the rescue leaves after a job's overrun and the margin")
	require.Equal(t, cfg.RescueAfter-rescueMargin, timeout(cfg))

	cfg = (&DeliverConfig{RescueAfter: time.Minute}).withDefaults()
	require.Equal(t, cfg.Slice, cfg.MaxRun, "at least a slice under the shortest rescue")

	cfg = (&DeliverConfig{RescueAfter: time.Minute, Slice: 2 * time.Second}).withDefaults()
	require.Equal(t, 3*time.Second, cfg.MaxRun)

	for _, run := range []time.Duration{300 * time.Millisecond, 10 * time.Second, 5 * time.Minute} {
		require.Equal(t, run, (&DeliverConfig{MaxRun: run}).withDefaults().MaxRun, "explicit")
	}
}

// TestNewDeliverer_RefusesAJobTimeoutPastTheRescue: a configured rescue of
// stuck jobs that a job's timeout reaches is refused at start, naming the
// keys; one it does not reach is taken.
func TestNewDeliverer_RefusesAJobTimeoutPastTheRescue(t *testing.T) {
	_, err := NewDeliverer(nil, nil, nil, &DeliverConfig{RescueAfter: 2 * time.Minute, Timeout: 2 * time.Minute})
	require.ErrorContains(t, err, "river.rescue_stuck_jobs_after (2m0s) must exceed a webhook delivery job's timeout (2m37s")
	require.ErrorContains(t, err, "webhooks.timeout")
	_, err = NewDeliverer(nil, nil, nil, &DeliverConfig{RescueAfter: time.Minute})
	require.NoError(t, err, "the shortest rescue with the other defaults")
	_, err = NewDeliverer(nil, nil, nil, &DeliverConfig{Timeout: 2 * time.Minute})
	require.NoError(t, err, "no rescue configured: not checked")
}
