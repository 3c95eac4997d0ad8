package outbound

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bothy/bothy/services/server/internal/egress"
)

// ErrTargetRefused is returned when a target URL or an address it resolves
// to is refused by the egress policy; it wraps egress.ErrRefused too and
// says why.
var ErrTargetRefused = errors.New("webhook target refused")

// AllowPrivateTargetsKey is the configuration key that lets webhooks reach
// loopback and private addresses.
const AllowPrivateTargetsKey = "webhooks.allow_private_targets"

// PrivateHint names the setting that would have let a refused target
// through, so whoever reads the refusal (an API client, a CLI user, an
// attempt's error) knows what the server's operator would have to change;
// "" for refusals no setting lifts.
func PrivateHint(err error) string {
	if errors.Is(err, egress.ErrPrivate) {
		return "; private targets are refused unless the server sets " + AllowPrivateTargetsKey + " = true (for development and tests)"
	}
	return ""
}

// NewHTTPClient returns the client deliveries use: no proxy (a proxy would
// connect on our behalf and bypass the address check), no redirects, the
// egress policy at every dial (a refusal wraps ErrTargetRefused), and
// timeout as the bound on a whole attempt.
func NewHTTPClient(timeout time.Duration, allowPrivate bool) *http.Client {
	p := egress.Policy{AllowPrivate: allowPrivate}
	// Every sender keeps a connection to its receiver, and an unordered one
	// up to max_in_flight: many subscriptions of one owner often share a
	// host, and a connection closed for want of an idle slot costs a new
	// handshake per request.
	tr := p.Transport(egress.TransportConfig{
		DialTimeout:           timeout,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		Refused: func(err error) error {
			return fmt.Errorf("%w: %w%s", ErrTargetRefused, err, PrivateHint(err))
		},
	})
	return egress.Client(tr, timeout)
}
