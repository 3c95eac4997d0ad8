package webhooks

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// UpdateParams changes a subscription; nil fields stay as they are. Added
// for the HTTP API's PATCH (issue 8, D-M4-02-4).
type UpdateParams struct {
	// URL is the new target, validated like Create's.
	URL *string
	// EventTypes replaces the filter; an empty slice delivers every type.
	EventTypes *[]string
	// AllowPrivateTargets accepts loopback and private addresses
	// (webhooks.allow_private_targets).
	AllowPrivateTargets bool
	// Resolver for the target host. Default net.DefaultResolver.
	Resolver Resolver
	// Limits bound the filter. Nil: the defaults.
	Limits *Limits
}

// Update changes a subscription's target and filter and returns it. The
// signing secret, owner, space and position in the log are kept: pending
// deliveries go to the new URL, and the filter applies to events read by
// later rounds. Rights are the caller's to check.
func Update(ctx context.Context, q authz.Querier, id uuid.UUID, p *UpdateParams) (*Subscription, error) {
	var url *string
	if p.URL != nil {
		res := p.Resolver
		if res == nil {
			res = defaultResolver
		}
		u, err := ValidateTarget(ctx, res, *p.URL, p.AllowPrivateTargets)
		if err != nil {
			return nil, err
		}
		s := u.String()
		url = &s
	}
	var types []string
	if p.EventTypes != nil {
		types = *p.EventTypes
		if types == nil {
			types = []string{}
		}
		if err := validateEventTypes(types, p.Limits.withDefaults()); err != nil {
			return nil, err
		}
	}
	ct, err := q.Exec(ctx, `
UPDATE webhook_subscriptions
SET url = coalesce($2, url), event_types = coalesce($3, event_types), updated_at = now()
WHERE id = $1`, id, url, types)
	if err != nil {
		return nil, fmt.Errorf("update webhook subscription %s: %w", id, err)
	}
	if ct.RowsAffected() == 0 {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return Get(ctx, q, id)
}
