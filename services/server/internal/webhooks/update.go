package webhooks

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// UpdateParams changes a subscription; nil fields stay as they are. It
// serves the HTTP API's PATCH.
type UpdateParams struct {
	// URL is the new target, validated like Create's.
	URL *string
	// EventTypes replaces the filter; an empty slice delivers every type.
	EventTypes *[]string
	// Headers is a merge patch of the custom headers: a value sets a
	// header, nil removes it, names not given stay. The result is bounded
	// like Create's.
	Headers map[string]*string
	// AllowPrivateTargets accepts loopback and private addresses
	// (webhooks.allow_private_targets).
	AllowPrivateTargets bool
	// Resolver for the target host. Default net.DefaultResolver.
	Resolver Resolver
	// Limits bound the filter. Nil: the defaults.
	Limits *Limits
	// Policy changes the delivery policy, throttle and retry schedule; nil
	// fields stay (PolicyParams). It applies from the next claim.
	Policy *PolicyParams
}

// Update changes a subscription's target, filter and custom headers and
// returns it. The
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
	var setHeaders any // nil: keep the headers
	removeHeaders := []string{}
	if p.Headers != nil {
		set, remove, err := normalizeHeaderPatch(p.Headers)
		if err != nil {
			return nil, err
		}
		setHeaders, removeHeaders = set, append(removeHeaders, remove...)
	}
	if err := p.Policy.validate(); err != nil {
		return nil, err
	}
	db, ok := q.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return nil, errors.New("webhooks: the querier cannot begin a transaction")
	}
	// The patched headers are checked as a whole before the transaction
	// commits, so concurrent patches cannot together exceed the bounds.
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var headers map[string]string
		err := tx.QueryRow(ctx, `
UPDATE webhook_subscriptions
SET url = coalesce($2, url), event_types = coalesce($3, event_types),
    headers = CASE WHEN $4::jsonb IS NULL THEN headers ELSE (headers - $5::text[]) || $4::jsonb END, updated_at = now()
WHERE id = $1
RETURNING headers`, id, url, types, setHeaders, removeHeaders).Scan(&headers)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("update webhook subscription %s: %w", id, err)
		}
		if err := checkHeaderTotals(headers); err != nil {
			return err
		}
		return setPolicy(ctx, tx, id, p.Policy, p.Limits)
	})
	if err != nil {
		return nil, err
	}
	return Get(ctx, q, id)
}
