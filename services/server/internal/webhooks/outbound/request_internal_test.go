package outbound

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParseRetryAfter: Retry-After is delay-seconds or an HTTP date;
// anything else, and a time already past, asks for nothing.
func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"120":                           2 * time.Minute,
		" 5 ":                           5 * time.Second,
		"0":                             0,
		"-3":                            0,
		"99999999999":                   30 * 24 * time.Hour,
		"Wed, 04 Mar 2026 05:08:07 GMT": 2 * time.Minute,
		"Wed, 04 Mar 2026 05:05:07 GMT": 0,
		"tomorrow":                      0,
		"1.5":                           0,
	} {
		require.Equal(t, want, ParseRetryAfter(v, now), "Retry-After: %q", v)
	}
}
