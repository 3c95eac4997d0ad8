package delivery

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// within reports whether got is in want's jitter range, its upper half.
func within(t *testing.T, got, want time.Duration, msgAndArgs ...any) {
	t.Helper()
	require.GreaterOrEqual(t, got, want/2, msgAndArgs...)
	require.LessOrEqual(t, got, want, msgAndArgs...)
}

// TestProbeWait_GrowsUpToTheCeiling: a recovering subscription is probed
// first after its retry_max, then at doubling intervals up to an hour (or
// its retry_max, if that is longer), and never sooner than Retry-After
// asks, capped by retry_max.
func TestProbeWait_GrowsUpToTheCeiling(t *testing.T) {
	s := schedule{base: 100 * time.Millisecond, max: time.Second, budget: time.Hour}
	for probes := range 16 {
		within(t, probeWait(s, probes, 0), min(time.Second<<probes, maxProbeWait), "after %d failed probes", probes)
	}
	require.Equal(t, time.Second, probeWait(s, 0, 10*time.Second), "Retry-After, capped by retry_max")

	long := schedule{base: time.Second, max: 2 * time.Hour, budget: 100 * time.Hour}
	within(t, probeWait(long, 5, 0), 2*time.Hour, "a retry_max above an hour is the ceiling")
}

// TestBackoff_DoublesUpToRetryMax: retry n waits the base doubled n-1
// times, capped by retry_max, and at least Retry-After, capped likewise.
func TestBackoff_DoublesUpToRetryMax(t *testing.T) {
	s := schedule{base: 100 * time.Millisecond, max: time.Second, budget: time.Hour}
	for attempts, want := range []time.Duration{100, 100, 200, 400, 800, 1000, 1000} {
		if attempts == 0 {
			continue
		}
		within(t, backoff(s, attempts, 0), want*time.Millisecond, "after %d attempts", attempts)
	}
	require.Equal(t, 700*time.Millisecond, backoff(s, 1, 700*time.Millisecond), "Retry-After above the backoff")
	require.Equal(t, time.Second, backoff(s, 1, time.Hour), "Retry-After capped by retry_max")
}
