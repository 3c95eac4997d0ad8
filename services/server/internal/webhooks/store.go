package webhooks

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
)

// Status of a subscription.
const (
	StatusActive   = "active"
	StatusDisabled = "disabled"
)

// Causes of a disabled subscription.
const (
	// CauseGap: events the subscription should have received left the log
	// (retention) before they were delivered or even read.
	CauseGap = "gap"
	// CauseFailing: a delivery kept failing for the whole retry budget.
	CauseFailing = "failing"
	// CauseGone: the receiver answered 410 Gone.
	CauseGone = "gone"
	// CauseManual: the owner or an operator disabled it.
	CauseManual = "manual"
)

// Delivery statuses.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryDead      = "dead"
	DeliverySkipped   = "skipped"
)

var (
	// ErrNotFound is returned for an unknown subscription.
	ErrNotFound = errors.New("webhook subscription not found")
	// ErrInvalid is returned for a malformed field of a new subscription.
	ErrInvalid = errors.New("invalid webhook subscription")
	// ErrForbidden is returned when the owner may not manage webhooks on
	// the space.
	ErrForbidden = errors.New("not allowed")
	// ErrLimit is returned by Create and Update when a subscription would
	// exceed one of Limits; the wrapping error names the field and the
	// configuration key.
	ErrLimit = errors.New("webhook subscription limit reached")
	// ErrRotationInProgress is returned by RotateSecret when the previous
	// secret still signs (its overlap has not ended) and the new rotation
	// would keep an overlap too.
	ErrRotationInProgress = errors.New("a secret rotation is in progress")
)

// Defaults of Limits, the defaults of the configuration keys named there.
const (
	DefaultMaxEventTypes            = 100
	DefaultMaxSubscriptionsPerSpace = 100
	DefaultMaxSubscriptionsPerOwner = 1000
)

// Limits bound what one owner or space can ask of the webhooks consumer.
// A round's matching does not grow with filter counts (see handleSQL), but
// every subscription on a space is a delivery row per matching event and a
// sender that may run, and every filter is a row to store; the limits keep
// one tenant's share of rounds and senders in proportion. Subscriptions of
// every status count: a disabled one can be enabled again. Rows written
// before a limit existed (or directly in SQL) keep working and are matched
// at the same cost (TestConsumer_TenantIsolation); an update of such a
// subscription must come within the limit.
type Limits struct {
	// MaxEventTypes is the most event-type filters one subscription may
	// have (webhooks.max_event_types). Default DefaultMaxEventTypes.
	MaxEventTypes int
	// MaxSubscriptionsPerSpace is the most subscriptions of all owners on
	// one space (webhooks.max_subscriptions_per_space). Default
	// DefaultMaxSubscriptionsPerSpace.
	MaxSubscriptionsPerSpace int
	// MaxSubscriptionsPerOwner is the most subscriptions of one owner on
	// all spaces (webhooks.max_subscriptions_per_owner). Default
	// DefaultMaxSubscriptionsPerOwner.
	MaxSubscriptionsPerOwner int
	// EventRetention bounds a subscription's retry budget from above
	// (sync.event_retention): a failing receiver's deliveries must end
	// dead or disabled while their events are still in the log. Default:
	// only MaxRetryBudget.
	EventRetention time.Duration
}

// withDefaults returns l (nil: all defaults) with zero fields defaulted.
func (l *Limits) withDefaults() Limits {
	c := Limits{}
	if l != nil {
		c = *l
	}
	c.MaxEventTypes = cmp.Or(c.MaxEventTypes, DefaultMaxEventTypes)
	c.MaxSubscriptionsPerSpace = cmp.Or(c.MaxSubscriptionsPerSpace, DefaultMaxSubscriptionsPerSpace)
	c.MaxSubscriptionsPerOwner = cmp.Or(c.MaxSubscriptionsPerOwner, DefaultMaxSubscriptionsPerOwner)
	return c
}

// validateEventTypes checks a filter list against the grammar and the
// limit, naming the field as the HTTP API spells it.
func validateEventTypes(types []string, l Limits) error {
	if len(types) > l.MaxEventTypes {
		return fmt.Errorf("%w: event_types: %d filters, at most %d (webhooks.max_event_types); "+
			"use a prefix filter such as item.* instead of listing its types", ErrLimit, len(types), l.MaxEventTypes)
	}
	for _, t := range types {
		if !sync.ValidTypePattern(t) {
			return fmt.Errorf("%w: event_types: filter %q: want item.created, item.* or *, at most %d bytes",
				ErrInvalid, t, sync.MaxTypePatternLen)
		}
	}
	return nil
}

// countsSQL counts the subscriptions of a space and of an owner, of every
// status.
const countsSQL = `
SELECT (SELECT count(*) FROM webhook_subscriptions WHERE space = $1),
       (SELECT count(*) FROM webhook_subscriptions WHERE owner = $2)`

// checkCounts refuses a new subscription on space for owner beyond the
// limits. It runs in Create's transaction, after the lock atHead takes,
// which orders every Create: two cannot both see room for one.
func checkCounts(ctx context.Context, tx pgx.Tx, space, owner string, l Limits) error {
	var inSpace, ofOwner int
	if err := tx.QueryRow(ctx, countsSQL, space, owner).Scan(&inSpace, &ofOwner); err != nil {
		return fmt.Errorf("count webhook subscriptions: %w", err)
	}
	if inSpace >= l.MaxSubscriptionsPerSpace {
		return fmt.Errorf("%w: space: %q has %d subscriptions, at most %d (webhooks.max_subscriptions_per_space); "+
			"delete one first", ErrLimit, space, inSpace, l.MaxSubscriptionsPerSpace)
	}
	if ofOwner >= l.MaxSubscriptionsPerOwner {
		return fmt.Errorf("%w: owner: %q has %d subscriptions, at most %d (webhooks.max_subscriptions_per_owner); "+
			"delete one first", ErrLimit, owner, ofOwner, l.MaxSubscriptionsPerOwner)
	}
	return nil
}

// Subscription is a stored subscription, without its secrets.
type Subscription struct {
	ID             uuid.UUID
	Owner          string
	Space          string
	URL            string
	EventTypes     []string
	TokenID        *uuid.UUID
	Status         string
	DisabledCause  string
	DisabledDetail string
	DisabledAt     *time.Time
	ResumeAfterSeq int64
	// LastDeliveredSeq is the sender's resume point: the highest seq
	// delivered, or the head at creation (or at an enable from the head)
	// when none was delivered since. LastSuccessSeq says what was
	// delivered.
	LastDeliveredSeq int64
	// LastSuccessSeq and LastSuccessAt are the newest kept delivery
	// that was delivered (answered 2xx) and when; nil when none is.
	LastSuccessSeq *int64
	LastSuccessAt  *time.Time
	CreatedAt      time.Time
	Policy         Policy
	// Probing: disabled as failing and probed with its head delivery
	// (Policy.AutoRecover).
	Probing bool
	// Pending is the number of pending deliveries.
	Pending int64
	// Headers are the custom request headers, values whole: show them
	// through MaskHeaders only.
	Headers map[string]string
	// Destination is where messages go; its Config carries credentials
	// whole: show it through Destination.Redacted only.
	Destination Destination
	// Filter and Transform are the CEL expressions over the event ("" for
	// none): which matching events are delivered, and the body sent.
	Filter    string
	Transform string
}

// NewSecret returns a fresh signing secret in the Standard Webhooks form:
// "whsec_" and 32 random bytes in standard base64.
func NewSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b), nil
}

// CreateParams describes a new subscription.
type CreateParams struct {
	// Owner is the principal the deliveries act for; its rights are checked
	// at every delivery.
	Owner string
	Space string
	URL   string
	// Destination, if set, is the API's destination object: {"kind":
	// "http", "url": ...} or a broker kind with its fields (package kinds).
	// Nil: URL is an HTTP receiver.
	Destination json.RawMessage
	// EventTypes filter what is delivered: exact types ("item.created"),
	// prefixes ("item.*") or "*". Empty delivers every type.
	EventTypes []string
	// TokenID, if set, is the token the subscription was created with; its
	// current scopes bound every delivery. Nil: the owner's full rights.
	TokenID *uuid.UUID
	// Secret, if set, is used instead of a generated one (whsec_ form).
	Secret string
	// Headers are sent with every request (see MaxHeaders and
	// outbound.RefusedHeader for what is refused). Nil: none.
	Headers map[string]string
	// AllowPrivateTargets accepts loopback and private addresses
	// (webhooks.allow_private_targets).
	AllowPrivateTargets bool
	// Resolver for the target host. Default net.DefaultResolver.
	Resolver Resolver
	// Limits bound the filter and the subscription counts. Nil: the
	// defaults.
	Limits *Limits
	// Policy, if set, chooses the delivery policy, throttle and retry
	// schedule. Nil: ordered, on the server's schedule.
	Policy *PolicyParams
	// Filter, if not "", is a CEL expression over the event (package
	// eventexpr): only matching events for which it is true are delivered.
	Filter string
	// Transform, if not "", is a CEL expression over the event whose value
	// (a map or a list) is the JSON body sent instead of the envelope.
	Transform string
}

// Create validates and stores a subscription and returns it with its
// signing secret (shown once). It starts at the head of the log: only
// events committed after it was created are delivered. The owner must be
// allowed webhooks.manage on the space (with the token's scopes, if one is
// given).
func Create(ctx context.Context, q authz.Querier, rounds sync.RoundBarrier, p *CreateParams) (*Subscription, string, error) {
	dest, limits, headers, err := validateCreate(ctx, p)
	if err != nil {
		return nil, "", err
	}
	if err := allowedToManage(ctx, q, p); err != nil {
		return nil, "", err
	}
	secret, err := createSecret(p.Secret)
	if err != nil {
		return nil, "", err
	}
	pol, err := newPolicy(p.Policy, &limits)
	if err != nil {
		return nil, "", err
	}
	if err := checkBatch(dest.kind, pol.MaxBatch); err != nil {
		return nil, "", err
	}
	if err := checkOrdered(dest.kind, pol.Name); err != nil {
		return nil, "", err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, "", err
	}
	types := p.EventTypes
	if types == nil {
		types = []string{}
	}
	s := &Subscription{ID: id, Owner: p.Owner, Space: p.Space, URL: dest.url, EventTypes: types, TokenID: p.TokenID, Status: StatusActive,
		Headers: headers, Destination: Destination{Kind: dest.kind, Config: dest.config},
		Filter: p.Filter, Transform: p.Transform}
	err = atHead(ctx, q, rounds, func(tx pgx.Tx, _ int64) error {
		if err := checkCounts(ctx, tx, p.Space, p.Owner, limits); err != nil {
			return err
		}
		if err := insertSubscription(ctx, tx, s, secret); err != nil {
			return err
		}
		return writePolicy(ctx, tx, id, &pol)
	})
	if errors.Is(err, ErrLimit) {
		return nil, "", err
	}
	if err != nil {
		return nil, "", fmt.Errorf("create webhook subscription: %w", err)
	}
	s.Policy = pol
	return s, secret, nil
}

// validateCreate checks the destination, the event-type filter, the
// custom headers and the expressions of a new subscription, in that order, and returns the
// destination (an http one's URL in its normal form), the limits with
// their defaults and the headers.
func validateCreate(ctx context.Context, p *CreateParams) (*checkedDestination, Limits, map[string]string, error) {
	res := p.Resolver
	if res == nil {
		res = defaultResolver
	}
	raw := p.Destination
	if raw == nil {
		raw = json.RawMessage(`{"kind":"http"}`)
	}
	dest, err := checkDestination(ctx, res, raw, p.URL, p.AllowPrivateTargets)
	if err != nil {
		return nil, Limits{}, nil, err
	}
	if dest.config, err = keepMasked(dest.kind, dest.config, nil); err != nil {
		return nil, Limits{}, nil, err // a new subscription has no credential to keep
	}
	limits := p.Limits.withDefaults()
	if err := validateEventTypes(p.EventTypes, limits); err != nil {
		return nil, Limits{}, nil, err
	}
	headers, err := normalizeHeaders(p.Headers)
	if err != nil {
		return nil, Limits{}, nil, err
	}
	if err := validateExpressions(p.Filter, p.Transform); err != nil {
		return nil, Limits{}, nil, err
	}
	return dest, limits, headers, nil
}

// allowedToManage refuses with ErrForbidden unless the owner (with the
// token's scopes, if one is given) may manage webhooks on the space.
func allowedToManage(ctx context.Context, q authz.Querier, p *CreateParams) error {
	d, err := authz.Allowed(ctx, q, &authz.Request{Action: authz.ActionWebhookManage, Principal: p.Owner, Space: p.Space, Token: p.TokenID})
	if err != nil {
		return err
	}
	if !d.Allowed {
		return fmt.Errorf("%w: %s", ErrForbidden, d.Reason)
	}
	return nil
}

// createSecret returns the given signing secret if it has the whsec_ form,
// or a fresh one if none is given.
func createSecret(given string) (string, error) {
	if given == "" {
		secret, err := NewSecret()
		if err != nil {
			return "", fmt.Errorf("webhook secret: %w", err)
		}
		return secret, nil
	}
	if _, err := base64.StdEncoding.DecodeString(given[min(len(given), len("whsec_")):]); err != nil || len(given) < len("whsec_")+8 || given[:6] != "whsec_" {
		return "", fmt.Errorf("%w: secret must be whsec_ followed by base64", ErrInvalid)
	}
	return given, nil
}

// insertSubscription stores s with its secret at the head of the log and
// fills in the positions and creation time the database gave it.
func insertSubscription(ctx context.Context, tx pgx.Tx, s *Subscription, secret string) error {
	return tx.QueryRow(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, event_types, token_id, resume_after_seq, last_delivered_seq, headers,
    destination_kind, destination, filter, transform)
SELECT $1, $2, $3, $4, $5, $6, $7, last_seq, last_seq, $8, $9, $10, nullif($11, ''), nullif($12, '') FROM event_seq
RETURNING resume_after_seq, last_delivered_seq, created_at`,
		s.ID, s.Owner, s.Space, s.URL, secret, s.EventTypes, s.TokenID, s.Headers, s.Destination.Kind, s.Destination.Config, s.Filter, s.Transform).Scan(&s.ResumeAfterSeq, &s.LastDeliveredSeq, &s.CreatedAt)
}

const subscriptionColumns = `s.id, s.owner, s.space, s.url, s.event_types, s.token_id, s.status, coalesce(s.disabled_cause, ''),
coalesce(s.disabled_detail, ''), s.disabled_at, s.resume_after_seq, ` + deliveredThroughSQL + `, s.created_at,
(SELECT count(*) FROM webhook_deliveries d WHERE d.subscription_id = s.id AND d.status = 'pending'), s.headers,
` + PolicyColumns + `, s.probing, ok.event_seq, ok.finished_at, s.destination_kind, s.destination, coalesce(s.filter, ''), coalesce(s.transform, '')`

// subscriptionFrom is the FROM of subscriptionColumns: the subscription
// with its newest delivered delivery, found walking its deliveries back
// from the newest by the primary key.
const subscriptionFrom = `webhook_subscriptions s LEFT JOIN LATERAL (
    SELECT d.event_seq, d.finished_at FROM webhook_deliveries d
    WHERE d.subscription_id = s.id AND d.status = 'delivered' ORDER BY d.event_seq DESC LIMIT 1
) ok ON true`

func scanSubscription(row pgx.CollectableRow) (*Subscription, error) {
	s := &Subscription{}
	ps := ScanPolicy(&s.Policy)
	err := row.Scan(append(append([]any{&s.ID, &s.Owner, &s.Space, &s.URL, &s.EventTypes, &s.TokenID, &s.Status, &s.DisabledCause,
		&s.DisabledDetail, &s.DisabledAt, &s.ResumeAfterSeq, &s.LastDeliveredSeq, &s.CreatedAt, &s.Pending, &s.Headers},
		ps.Dest()...), &s.Probing, &s.LastSuccessSeq, &s.LastSuccessAt, &s.Destination.Kind, &s.Destination.Config, &s.Filter, &s.Transform)...)
	ps.Done()
	return s, err
}

// Get reads one subscription.
func Get(ctx context.Context, q authz.Querier, id uuid.UUID) (*Subscription, error) {
	rows, err := q.Query(ctx, `SELECT `+subscriptionColumns+` FROM `+subscriptionFrom+` WHERE s.id = $1`, id)
	if err != nil {
		return nil, fmt.Errorf("read webhook subscription %s: %w", id, err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanSubscription)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	return s, err
}

// ListParams filters List; zero values match everything.
type ListParams struct {
	Owner string
	Space string
	// AfterCreatedAt and AfterID, when AfterID is set, start the list after
	// that subscription in its order (page.Key of the previous page's last
	// one).
	AfterCreatedAt time.Time
	AfterID        uuid.UUID
	// Limit returns at most this many; 0 returns all.
	Limit int
}

// List returns subscriptions in creation order: created_at, then id, a
// unique key, so pages taken after a subscription never repeat or skip one
// that existed when the walk started.
func List(ctx context.Context, q authz.Querier, p *ListParams) ([]*Subscription, error) {
	var after *time.Time
	if p.AfterID != uuid.Nil {
		after = &p.AfterCreatedAt
	}
	var limit *int
	if p.Limit > 0 {
		limit = &p.Limit
	}
	rows, err := q.Query(ctx, `SELECT `+subscriptionColumns+` FROM `+subscriptionFrom+`
WHERE ($1 = '' OR s.owner = $1) AND ($2 = '' OR s.space = $2)
  AND ($3::timestamptz IS NULL OR (s.created_at, s.id) > ($3, $4::uuid))
ORDER BY s.created_at, s.id LIMIT $5`, p.Owner, p.Space, after, p.AfterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list webhook subscriptions: %w", err)
	}
	return pgx.CollectRows(rows, scanSubscription)
}

// DisableSQL disables one active (or probing) subscription ($1) with cause
// $2 and detail $3, and ends its sender's lease.
const DisableSQL = `
UPDATE webhook_subscriptions
SET status = 'disabled', disabled_cause = $2, disabled_detail = $3, disabled_at = now(), updated_at = now(),
    ` + lease.ClearSQL + `
WHERE id = $1 AND (status = 'active' OR probing)`

// Disable disables an active subscription by hand. Disabling a disabled
// one changes nothing and is not an error.
func Disable(ctx context.Context, q authz.Querier, id uuid.UUID, detail string) error {
	if _, err := Get(ctx, q, id); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, DisableSQL, id, CauseManual, detail); err != nil {
		return fmt.Errorf("disable webhook subscription %s: %w", id, err)
	}
	return nil
}

// EnableResult says where an enabled subscription resumes.
type EnableResult struct {
	// WasCause is why it had been disabled ("" if it was active).
	WasCause string
	// ResumeAfterSeq: events up to it are not delivered; the next event
	// after the current head is.
	ResumeAfterSeq int64
	// Skipped is how many pending deliveries were given up.
	Skipped int64
	// Created is how many deliveries EnableFromBacklog made for events
	// committed while the subscription was disabled (0 for Enable).
	Created int64
	// Reset is how many dead deliveries EnableFromBacklog made pending
	// again: those that disabled the subscription (0 for Enable).
	Reset int64
	// NotDelivered is the range of seqs after the last delivered one up to
	// the head that the subscription will never receive (Len 0: none).
	NotDeliveredFrom, NotDeliveredTo int64
}

// Enable re-activates a subscription. It resumes from the current head of
// the log: pending deliveries are marked skipped, and the result says which
// range will never be delivered, so the owner can resynchronize from the
// source of truth. EnableFromBacklog resumes with what was missed instead.
func Enable(ctx context.Context, q authz.Querier, rounds sync.RoundBarrier, id uuid.UUID) (*EnableResult, error) {
	res := &EnableResult{}
	var last int64
	err := atHead(ctx, q, rounds, func(tx pgx.Tx, _ int64) error {
		return tx.QueryRow(ctx, `
WITH old AS (SELECT coalesce(disabled_cause, '') AS cause, `+deliveredThroughSQL+` AS last_delivered_seq
    FROM webhook_subscriptions s WHERE id = $1 FOR NO KEY UPDATE),
up AS (
    UPDATE webhook_subscriptions s
    SET status = 'active', disabled_cause = NULL, disabled_detail = NULL, disabled_at = NULL, updated_at = now(),
        resume_after_seq = (SELECT last_seq FROM event_seq), backlog_from_seq = NULL, `+lease.ClearSQL+`
    WHERE s.id = $1 AND s.status = 'disabled'
    RETURNING s.resume_after_seq
),
skip AS (
    UPDATE webhook_deliveries d SET status = 'skipped', finished_at = now(), last_error = 'skipped: subscription re-enabled at the head'
    WHERE d.subscription_id = $1 AND d.status = 'pending' AND EXISTS (SELECT 1 FROM up)
    RETURNING 1
)
SELECT old.cause, old.last_delivered_seq, coalesce((SELECT resume_after_seq FROM up), -1), (SELECT count(*) FROM skip) FROM old`,
			id).Scan(&res.WasCause, &last, &res.ResumeAfterSeq, &res.Skipped)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("enable webhook subscription %s: %w", id, err)
	}
	if res.ResumeAfterSeq < 0 { // was active
		res.WasCause = ""
		res.ResumeAfterSeq = 0
		return res, nil
	}
	if res.ResumeAfterSeq > last {
		res.NotDeliveredFrom, res.NotDeliveredTo = last+1, res.ResumeAfterSeq
	}
	return res, nil
}

// rotateSQL replaces the secret unless an earlier rotation's overlap is
// still running and this one asks for an overlap too. It returns whether
// it rotated and until when the previous secret signs; no row: no such
// subscription. $3 is the overlap in seconds, a float8: compared with the
// literal 0 alone it would be typed int4 and lose its fraction.
const rotateSQL = `
WITH cur AS (
    SELECT id, previous_secret_until AS until, coalesce(previous_secret_until > now(), false) AS overlapping
    FROM webhook_subscriptions WHERE id = $1 FOR NO KEY UPDATE
), up AS (
    UPDATE webhook_subscriptions s
    SET previous_secret = CASE WHEN $3::float8 > 0 THEN s.secret END,
        previous_secret_until = CASE WHEN $3::float8 > 0 THEN now() + make_interval(secs => $3::float8) END,
        secret = $2, updated_at = now()
    FROM cur WHERE s.id = cur.id AND ($3::float8 = 0 OR NOT cur.overlapping)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM up), cur.until FROM cur`

// RotateSecret gives the subscription a new signing secret and returns it.
// With overlap > 0 the old one stays valid until then: every request
// carries signatures with both, so receivers can switch without losing a
// delivery. A request carries at most one old secret's signature, so while
// an earlier rotation's old secret still signs, a rotation with an overlap
// returns ErrRotationInProgress (with the time that overlap ends) instead
// of dropping that secret before its announced end, which would fail every
// receiver that has not switched yet. Overlap 0 always rotates and ends
// every old secret at once: the way out when a secret has leaked.
func RotateSecret(ctx context.Context, q authz.Querier, id uuid.UUID, overlap time.Duration) (string, error) {
	secret, err := NewSecret()
	if err != nil {
		return "", err
	}
	var rotated bool
	var until *time.Time
	err = q.QueryRow(ctx, rotateSQL, id, secret, overlap.Seconds()).Scan(&rotated, &until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("rotate secret of %s: %w", id, err)
	}
	if !rotated {
		return "", fmt.Errorf("%w: the previous secret signs until %s; rotate again after that, or with an overlap of 0 "+
			"to end every old secret now", ErrRotationInProgress, until.UTC().Format(time.RFC3339))
	}
	return secret, nil
}

// Delivery is one stored delivery with its latest attempt.
type Delivery struct {
	SubscriptionID uuid.UUID
	Seq            int64
	EventID        uuid.UUID
	Status         string
	Attempts       int
	CreatedAt      time.Time
	FinishedAt     *time.Time
	NextAttemptAt  *time.Time
	LastError      string
	// ResentAt is when a resend last made it pending again; nil if never.
	ResentAt *time.Time
}

// Attempt is one recorded request (or refusal before a request).
type Attempt struct {
	Seq          int64
	At           time.Time
	StatusCode   *int
	Duration     time.Duration
	Error        string
	ResponseHead string
	// MessageID is the webhook-id the request was signed under when it is
	// not the event's own (a batch's), "" when no request was sent (a
	// refusal), nil for a request of the event alone.
	MessageID *string
}

// DeliveriesParams selects deliveries of one subscription.
type DeliveriesParams struct {
	SubscriptionID uuid.UUID
	// Status filters; "" for all.
	Status string
	// Limit: newest first, at most this many. Default 50.
	Limit int
	// BeforeSeq, if not 0, lists only deliveries of lower seqs: the next
	// page after one that ended at that seq.
	BeforeSeq int64
	// Seq, if not 0, lists only the delivery of that seq.
	Seq int64
	// EventID, if not nil, lists only the delivery of that event.
	EventID uuid.UUID
	// Since and Until, if not zero, list only deliveries created at or
	// after Since and before Until.
	Since, Until time.Time
	// Type, if not empty, lists only deliveries of events whose type this
	// pattern matches (sync.ValidTypePattern: item.created, item.* or *).
	// Deliveries have no type of their own: the event is looked up in the
	// log by its seq, so a delivery whose event retention removed matches
	// no pattern.
	Type string
}

// Deliveries lists a subscription's deliveries, newest first (by seq, the
// primary key's order, so a walk by BeforeSeq sees every delivery older
// than its first page exactly once while newer ones are added).
// Seqs are passed as bigint explicitly: a parameter compared only with
// the literal 0 would be typed int4, and a seq past 2^31 refused.
func Deliveries(ctx context.Context, q authz.Querier, p *DeliveriesParams) ([]Delivery, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	rows, err := q.Query(ctx, `
SELECT subscription_id, event_seq, event_id, status, attempts, created_at, finished_at, next_attempt_at, coalesce(last_error, ''), resent_at
FROM webhook_deliveries d WHERE subscription_id = $1 AND ($2 = '' OR status = $2) AND ($4::bigint = 0 OR event_seq < $4::bigint)
AND ($5::uuid IS NULL OR event_id = $5) AND ($6::timestamptz IS NULL OR created_at >= $6) AND ($7::timestamptz IS NULL OR created_at < $7)
AND ($8::text IS NULL OR EXISTS (
    SELECT 1 FROM event_log e WHERE e.seq = d.event_seq
    AND (e.type = $8 OR (right($8, 1) = '*' AND starts_with(e.type, left($8, -1))))))
AND ($9::bigint = 0 OR event_seq = $9::bigint)
ORDER BY event_seq DESC LIMIT $3`, p.SubscriptionID, p.Status, limit, p.BeforeSeq, nullUUID(p.EventID), nullTime(p.Since), nullTime(p.Until),
		nullString(p.Type), p.Seq)
	if err != nil {
		return nil, fmt.Errorf("list deliveries of %s: %w", p.SubscriptionID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		var d Delivery
		err := row.Scan(&d.SubscriptionID, &d.Seq, &d.EventID, &d.Status, &d.Attempts, &d.CreatedAt, &d.FinishedAt, &d.NextAttemptAt, &d.LastError,
			&d.ResentAt)
		return d, err
	})
}

// nullUUID, nullString and nullTime are NULL for the zero value: a filter
// not given.
func nullUUID(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Attempts lists the recorded attempts of one delivery, oldest first.
func Attempts(ctx context.Context, q authz.Querier, id uuid.UUID, seq int64) ([]Attempt, error) {
	rows, err := q.Query(ctx, `
SELECT event_seq, attempted_at, status_code, duration_seconds, coalesce(error, ''), coalesce(response_excerpt, ''), message_id
FROM webhook_attempts WHERE subscription_id = $1 AND event_seq = $2 ORDER BY id`, id, seq)
	if err != nil {
		return nil, fmt.Errorf("list attempts of %s/%d: %w", id, seq, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		var secs float64
		err := row.Scan(&a.Seq, &a.At, &a.StatusCode, &secs, &a.Error, &a.ResponseHead, &a.MessageID)
		a.Duration = time.Duration(secs * float64(time.Second))
		return a, err
	})
}
