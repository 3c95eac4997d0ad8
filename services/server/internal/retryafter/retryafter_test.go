package retryafter

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParse: Retry-After is delay-seconds or an HTTP date, at most Max;
// anything else, and a time already past, asks for nothing.
func TestParse(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                                0,
		"120":                             2 * time.Minute,
		" 5 ":                             5 * time.Second,
		"0":                               0,
		"-3":                              0,
		"99999999999":                     Max,
		"Wed, 04 Mar 2026 05:08:07 GMT":   2 * time.Minute,
		"Wed, 04 Mar 2026 05:05:07 GMT":   0,
		"Fri, 04 Mar 2033 05:06:07 GMT":   Max,
		" Wed, 04 Mar 2026 05:08:07 GMT ": 2 * time.Minute,
		"tomorrow":                        0,
		"1.5":                             0,
	} {
		require.Equal(t, want, Parse(v, now), "Retry-After: %q", v)
	}
}
