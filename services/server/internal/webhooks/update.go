package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// UpdateParams changes a subscription; nil fields stay as they are. It
// serves the HTTP API's PATCH.
type UpdateParams struct {
	// URL is the new target, validated like Create's; it makes the
	// destination an HTTP receiver.
	URL *string
	// Destination, if set, replaces the destination whole (the API's
	// object, as CreateParams.Destination): how a broker's credentials
	// are rotated.
	Destination json.RawMessage
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
	// Filter and Transform replace the CEL expressions; "" removes one. A
	// new filter applies to events read by later rounds, a new transform
	// to requests built after it.
	Filter    *string
	Transform *string
}

// Update changes a subscription's target, filter and custom headers and
// returns it. The
// signing secret, owner, space and position in the log are kept: pending
// deliveries go to the new URL, and the filter applies to events read by
// later rounds. Rights are the caller's to check.
func Update(ctx context.Context, q authz.Querier, id uuid.UUID, p *UpdateParams) (*Subscription, error) {
	c, err := validateUpdate(ctx, p)
	if err != nil {
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
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		before, err := c.expressionsBefore(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := c.apply(ctx, tx, id); err != nil {
			return err
		}
		if err := c.announce(ctx, tx, id, before); err != nil {
			return err
		}
		if err := setPolicy(ctx, tx, id, p.Policy, p.Limits); err != nil {
			return err
		}
		return checkStoredBatch(ctx, tx, id)
	})
	if err != nil {
		return nil, err
	}
	return Get(ctx, q, id)
}

// subscriptionChange is the validated change of an update, in the form the
// UPDATE takes it.
type subscriptionChange struct {
	url           *string  // nil: keep the target
	kind          *string  // nil: keep the destination
	config        []byte   // the destination's fields when kind is set
	types         []string // nil: keep the filter
	setHeaders    any      // nil: keep the headers
	removeHeaders []string // names to remove when setHeaders is not nil
	filter        *string  // nil: keep; "": remove
	transform     *string  // nil: keep; "": remove
}

// validateUpdate checks the target, the event-type filter, the header
// patch, the policy and the expressions of an update, in that order.
func validateUpdate(ctx context.Context, p *UpdateParams) (*subscriptionChange, error) {
	c := &subscriptionChange{removeHeaders: []string{}}
	if err := c.target(ctx, p); err != nil {
		return nil, err
	}
	if p.EventTypes != nil {
		c.types = *p.EventTypes
		if c.types == nil {
			c.types = []string{}
		}
		if err := validateEventTypes(c.types, p.Limits.withDefaults()); err != nil {
			return nil, err
		}
	}
	if p.Headers != nil {
		set, remove, err := normalizeHeaderPatch(p.Headers)
		if err != nil {
			return nil, err
		}
		c.setHeaders, c.removeHeaders = set, append(c.removeHeaders, remove...)
	}
	if err := p.Policy.validate(); err != nil {
		return nil, err
	}
	if p.Filter != nil {
		if err := validateExpression("filter", eventexpr.Filter, *p.Filter); err != nil {
			return nil, err
		}
	}
	if p.Transform != nil {
		if err := validateExpression("transform", eventexpr.Transform, *p.Transform); err != nil {
			return nil, err
		}
	}
	c.filter, c.transform = p.Filter, p.Transform
	return c, nil
}

// target validates the new destination or URL, if one is given; a URL
// alone makes the destination an HTTP receiver.
func (c *subscriptionChange) target(ctx context.Context, p *UpdateParams) error {
	if p.URL == nil && p.Destination == nil {
		return nil
	}
	res := p.Resolver
	if res == nil {
		res = defaultResolver
	}
	raw, url := p.Destination, ""
	if raw == nil {
		raw = json.RawMessage(`{"kind":"http"}`)
	}
	if p.URL != nil {
		url = *p.URL
	}
	d, err := checkDestination(ctx, res, raw, url, p.AllowPrivateTargets)
	if err != nil {
		return err
	}
	c.url, c.kind, c.config = &d.url, &d.kind, d.config
	return nil
}

// apply writes the change to subscription id in tx and checks the patched
// headers as a whole.
func (c *subscriptionChange) apply(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if err := c.keepCredentials(ctx, tx, id); err != nil {
		return err
	}
	var headers map[string]string
	err := tx.QueryRow(ctx, `
UPDATE webhook_subscriptions
SET url = coalesce($2, url), event_types = coalesce($3, event_types),
    headers = CASE WHEN $4::jsonb IS NULL THEN headers ELSE (headers - $5::text[]) || $4::jsonb END,
    destination_kind = coalesce($6, destination_kind), destination = coalesce($7::jsonb, destination),
    filter = CASE WHEN $8::text IS NULL THEN filter ELSE nullif($8, '') END,
    transform = CASE WHEN $9::text IS NULL THEN transform ELSE nullif($9, '') END, updated_at = now()
WHERE id = $1
RETURNING headers`, id, c.url, c.types, c.setHeaders, c.removeHeaders, c.kind, c.config, c.filter, c.transform).Scan(&headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update webhook subscription %s: %w", id, err)
	}
	return checkHeaderTotals(headers)
}

// keepCredentials puts the stored credentials in place of the masked
// values of a new destination that were sent back as the API shows them
// (keepMasked), reading the stored destination in tx so a concurrent
// rotation is not undone.
func (c *subscriptionChange) keepCredentials(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if c.kind == nil || !bytes.Contains(c.config, []byte(outbound.Masked)) {
		return nil
	}
	var stored Destination
	err := tx.QueryRow(ctx, `SELECT destination_kind, destination FROM webhook_subscriptions WHERE id = $1 FOR UPDATE`, id).
		Scan(&stored.Kind, &stored.Config)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update webhook subscription %s: %w", id, err)
	}
	c.config, err = keepMasked(*c.kind, c.config, &stored)
	return err
}

// checkStoredBatch refuses, within an update's transaction, a
// subscription whose destination and max_batch or policy no longer go
// together.
func checkStoredBatch(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	var kind, policy string
	var maxBatch int
	err := tx.QueryRow(ctx, `SELECT destination_kind, coalesce(max_batch, 0), policy FROM webhook_subscriptions WHERE id = $1`, id).
		Scan(&kind, &maxBatch, &policy)
	if err != nil {
		return fmt.Errorf("update webhook subscription %s: %w", id, err)
	}
	if err := checkBatch(kind, maxBatch); err != nil {
		return err
	}
	return checkOrdered(kind, policy)
}

// expressions is a subscription's filter and transform as stored, and its
// space.
type expressions struct {
	space             string
	filter, transform string
}

// expressionsBefore locks the subscription and reads its expressions
// before the change; nothing when the change leaves both alone.
func (c *subscriptionChange) expressionsBefore(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*expressions, error) {
	if c.filter == nil && c.transform == nil {
		return nil, nil
	}
	e := &expressions{}
	err := tx.QueryRow(ctx, `SELECT space, coalesce(filter, ''), coalesce(transform, '') FROM webhook_subscriptions
WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&e.space, &e.filter, &e.transform)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read webhook subscription %s: %w", id, err)
	}
	return e, nil
}

// announce appends bothy.webhook.updated to the subscription's space when
// the change set, replaced or removed its filter or transform, naming
// which: whatever reads the space's log (an audit, the owner's other
// subscriptions) learns that what the subscription receives changed.
func (c *subscriptionChange) announce(ctx context.Context, tx pgx.Tx, id uuid.UUID, before *expressions) error {
	if before == nil {
		return nil
	}
	var changed []string
	for _, x := range []struct {
		name     string
		now      *string
		previous string
	}{{"filter", c.filter, before.filter}, {"transform", c.transform, before.transform}} {
		switch {
		case x.now == nil || *x.now == x.previous:
		case *x.now == "":
			changed = append(changed, x.name+" removed")
		case x.previous == "":
			changed = append(changed, x.name+" set")
		default:
			changed = append(changed, x.name+" changed")
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return InsertNotice(ctx, tx, TypeUpdated, before.space, id, "", strings.Join(changed, ", "), 0)
}
