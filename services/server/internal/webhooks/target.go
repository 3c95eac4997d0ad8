package webhooks

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// ErrTargetRefused is returned when a target URL or an address it resolves
// to is refused by the egress policy; the error names the field (url),
// wraps egress.ErrRefused too and says why.
var ErrTargetRefused = outbound.ErrTargetRefused

// Resolver looks host names up; *net.Resolver is one.
type Resolver = egress.Resolver

var defaultResolver Resolver = net.DefaultResolver

// ValidateTarget checks a subscription's URL at creation and update with
// the egress policy (allowPrivate is webhooks.allow_private_targets): the
// URL's shape, then every address its host resolves to. The check is
// repeated at every connection (outbound.NewHTTPClient), so a later DNS change
// cannot lead a delivery into a refused range.
func ValidateTarget(ctx context.Context, r Resolver, raw string, allowPrivate bool) (*url.URL, error) {
	p := egress.Policy{AllowPrivate: allowPrivate}
	u, err := p.CheckURL(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: url: %w%s", ErrTargetRefused, err, outbound.PrivateHint(err))
	}
	if err := p.CheckResolved(ctx, r, u.Hostname()); err != nil {
		return nil, fmt.Errorf("%w: url: %w%s", ErrTargetRefused, err, outbound.PrivateHint(err))
	}
	return u, nil
}
