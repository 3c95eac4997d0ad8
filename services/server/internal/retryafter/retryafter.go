// Package retryafter reads the Retry-After header (RFC 9110 10.2.3) the
// same way for every outgoing request bothy makes: webhook deliveries and
// Web Push messages.
package retryafter

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max is the longest wait an answer can ask for; a longer one is cut to
// it, so a receiver cannot park a delivery for years with one header.
const Max = 30 * 24 * time.Hour

// Parse reads delay-seconds or an HTTP date relative to now, at most Max;
// 0 when the value is absent, malformed, not positive or already past.
func Parse(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(Max/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), Max)
	}
	return 0
}
