package webhooks

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Policies: how a subscription's deliveries are sent and what a failing
// receiver costs it (webhook_subscriptions.policy).
const (
	// PolicyOrdered sends in seq order, one request at a time; a head whose
	// retry budget is spent disables the subscription as failing. The
	// default.
	PolicyOrdered = "ordered"
	// PolicyOrderedDeadLetter sends in seq order; a head whose retry budget
	// is spent becomes dead (listed, recoverable) and the next one is sent.
	PolicyOrderedDeadLetter = "ordered_dead_letter"
	// PolicyUnordered sends up to MaxInFlight deliveries at once, for
	// receivers that deduplicate by webhook-id; each delivery is retried on
	// its own schedule and becomes dead after its own budget.
	PolicyUnordered = "unordered"
)

// Bounds of a policy, as the HTTP API documents them.
const (
	// DefaultMaxInFlight is an unordered subscription's MaxInFlight unless
	// one is given.
	DefaultMaxInFlight = 10
	// MaxMaxInFlight bounds MaxInFlight.
	MaxMaxInFlight = 100
	// MaxMaxBatch bounds MaxBatch.
	MaxMaxBatch = 1000
	// MinRequestsPerSecond and MaxRequestsPerSecond bound a throttle.
	MinRequestsPerSecond, MaxRequestsPerSecond = 0.1, 1000
	// MinRetryWait bounds RetryBase and RetryMax from below.
	MinRetryWait = 100 * time.Millisecond
	// MaxRetryBase, MaxRetryMax, MinRetryBudget and MaxRetryBudget bound
	// the schedule (the budget as webhooks.retry_budget).
	MaxRetryBase   = time.Hour
	MaxRetryMax    = 24 * time.Hour
	MinRetryBudget = time.Second
	MaxRetryBudget = 720 * time.Hour
)

// Policy is a subscription's delivery policy with its throttle and retry
// schedule, as stored. Zero values of the schedule are the server's
// configuration (DeliverConfig).
type Policy struct {
	// Name is PolicyOrdered, PolicyOrderedDeadLetter or PolicyUnordered.
	Name string
	// MaxInFlight is how many requests of an unordered subscription may be
	// in flight at once, over every job and process; 0 for the others.
	MaxInFlight int
	// AutoRecover: a subscription the ordered policy disables as failing
	// is probed with its head delivery and becomes active again on a 2xx.
	AutoRecover bool
	// MaxRequestsPerSecond bounds how often its requests start; 0: no bound.
	MaxRequestsPerSecond float64
	// RetryBase, RetryMax and RetryBudget are the retry schedule; 0: the
	// server's.
	RetryBase, RetryMax, RetryBudget time.Duration
	// MaxBatch, for the ordered policies, sends up to this many
	// consecutive events in one request, as a JSON array of envelopes
	// acknowledged as a whole; 0: one event per request, as an envelope.
	MaxBatch int
}

// PolicyParams sets a policy at create or changes it at update: nil fields
// keep their value (at create, the default), and a zero value returns a
// field to its default. MaxInFlight is only for PolicyUnordered.
type PolicyParams struct {
	Name                             *string
	MaxInFlight                      *int
	AutoRecover                      *bool
	MaxRequestsPerSecond             *float64
	RetryBase, RetryMax, RetryBudget *time.Duration
	MaxBatch                         *int
}

func (p *PolicyParams) empty() bool {
	return p == nil || (p.Name == nil && p.MaxInFlight == nil && p.AutoRecover == nil && p.MaxRequestsPerSecond == nil &&
		p.RetryBase == nil && p.RetryMax == nil && p.RetryBudget == nil && p.MaxBatch == nil)
}

// validate checks each field on its own, naming it as the HTTP API spells
// it; with checks those that depend on the others.
func (p *PolicyParams) validate() error {
	if p == nil {
		return nil
	}
	if p.Name != nil {
		switch *p.Name {
		case PolicyOrdered, PolicyOrderedDeadLetter, PolicyUnordered:
		default:
			return fmt.Errorf("%w: policy: %q, want ordered, ordered_dead_letter or unordered", ErrInvalid, *p.Name)
		}
	}
	if p.MaxInFlight != nil && (*p.MaxInFlight < 0 || *p.MaxInFlight > MaxMaxInFlight) {
		return fmt.Errorf("%w: max_in_flight: %d, want 1..%d", ErrInvalid, *p.MaxInFlight, MaxMaxInFlight)
	}
	if p.MaxBatch != nil && (*p.MaxBatch < 0 || *p.MaxBatch > MaxMaxBatch) {
		return fmt.Errorf("%w: max_batch: %d, want 1..%d (0: one event per request)", ErrInvalid, *p.MaxBatch, MaxMaxBatch)
	}
	if r := p.MaxRequestsPerSecond; r != nil && *r != 0 &&
		(math.IsNaN(*r) || *r < MinRequestsPerSecond || *r > MaxRequestsPerSecond) {
		return fmt.Errorf("%w: max_requests_per_second: %v, want %v..%v (0: no limit)", ErrInvalid, *r, MinRequestsPerSecond, MaxRequestsPerSecond)
	}
	for _, f := range []struct {
		name     string
		v        *time.Duration
		min, max time.Duration
	}{
		{"retry_base_seconds", p.RetryBase, MinRetryWait, MaxRetryBase},
		{"retry_max_seconds", p.RetryMax, MinRetryWait, MaxRetryMax},
		{"retry_budget_seconds", p.RetryBudget, MinRetryBudget, MaxRetryBudget},
	} {
		if f.v != nil && *f.v != 0 && (*f.v < f.min || *f.v > f.max) {
			return fmt.Errorf("%w: %s: %s, want %s..%s (0: the server's)", ErrInvalid, f.name, secs(*f.v), secs(f.min), secs(f.max))
		}
	}
	return nil
}

// with returns cur changed by p, and checks the fields that depend on each
// other. p has been validated.
func (cur Policy) with(p *PolicyParams) (Policy, error) {
	n := cur
	if p.Name != nil {
		n.Name = *p.Name
	}
	if n.Name == PolicyUnordered {
		if p.MaxInFlight != nil {
			n.MaxInFlight = *p.MaxInFlight
		}
		if n.MaxInFlight == 0 {
			n.MaxInFlight = DefaultMaxInFlight
		}
	} else {
		if p.MaxInFlight != nil && *p.MaxInFlight != 0 {
			return n, fmt.Errorf("%w: max_in_flight: only with policy unordered (this one is %s)", ErrInvalid, n.Name)
		}
		n.MaxInFlight = 0
	}
	if p.MaxBatch != nil {
		n.MaxBatch = *p.MaxBatch
	}
	if n.Name == PolicyUnordered && n.MaxBatch != 0 {
		// Batches are acknowledged as a whole, in order: unordered
		// receivers get one event per request, max_in_flight at once.
		if p.MaxBatch != nil {
			return n, fmt.Errorf("%w: max_batch: only with the ordered policies (this one is %s)", ErrInvalid, n.Name)
		}
		n.MaxBatch = 0
	}
	if p.AutoRecover != nil {
		n.AutoRecover = *p.AutoRecover
	}
	if n.Name != PolicyOrdered {
		// Only the ordered policy disables a subscription for failing, so
		// only it has something to recover from.
		if p.AutoRecover != nil && *p.AutoRecover {
			return n, fmt.Errorf("%w: auto_recover: only with policy ordered (this one is %s)", ErrInvalid, n.Name)
		}
		n.AutoRecover = false
	}
	if p.MaxRequestsPerSecond != nil {
		n.MaxRequestsPerSecond = *p.MaxRequestsPerSecond
	}
	for _, f := range []struct{ to, from *time.Duration }{{&n.RetryBase, p.RetryBase}, {&n.RetryMax, p.RetryMax}, {&n.RetryBudget, p.RetryBudget}} {
		if f.from != nil {
			*f.to = f.from.Truncate(time.Millisecond)
		}
	}
	if n.RetryBase != 0 && n.RetryMax != 0 && n.RetryBase > n.RetryMax {
		return n, fmt.Errorf("%w: retry_base_seconds: %s is above retry_max_seconds %s", ErrInvalid, secs(n.RetryBase), secs(n.RetryMax))
	}
	return n, nil
}

// checkLimits refuses a retry budget that would outlive the events.
func (pol *Policy) checkLimits(l *Limits) error {
	if l != nil && l.EventRetention > 0 && pol.RetryBudget >= l.EventRetention {
		return fmt.Errorf("%w: retry_budget_seconds: %s must be below sync.event_retention (%s s): "+
			"a failing receiver's deliveries must end while their events are in the log",
			ErrLimit, secs(pol.RetryBudget), secs(l.EventRetention))
	}
	return nil
}

// secs writes d in seconds as the HTTP API takes it.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

// PolicyColumns are the columns of a subscription's Policy (alias s), to be
// read with ScanPolicy.
const PolicyColumns = `s.policy, coalesce(s.max_in_flight, 0), s.auto_recover, coalesce(s.max_requests_per_second, 0),
coalesce(s.retry_base_ms, 0), coalesce(s.retry_max_ms, 0), coalesce(s.retry_budget_ms, 0), coalesce(s.max_batch, 0)`

// PolicyScanner scans PolicyColumns into a Policy.
type PolicyScanner struct {
	p                     *Policy
	base, maxW, budgetMil int64
}

// ScanPolicy returns the scanner of PolicyColumns into p: scan into Dest,
// then call Done.
func ScanPolicy(p *Policy) *PolicyScanner { return &PolicyScanner{p: p} }

// Dest returns the scan destinations of PolicyColumns.
func (s *PolicyScanner) Dest() []any {
	return []any{&s.p.Name, &s.p.MaxInFlight, &s.p.AutoRecover, &s.p.MaxRequestsPerSecond, &s.base, &s.maxW, &s.budgetMil, &s.p.MaxBatch}
}

// Done converts the scanned milliseconds.
func (s *PolicyScanner) Done() {
	s.p.RetryBase = time.Duration(s.base) * time.Millisecond
	s.p.RetryMax = time.Duration(s.maxW) * time.Millisecond
	s.p.RetryBudget = time.Duration(s.budgetMil) * time.Millisecond
}

// setPolicySQL writes a policy. Probing stops when auto_recover is turned
// off or the policy is no longer ordered; a throttle removed forgets its
// next slot. The milliseconds are cast to the columns' bigint: NULLIF with
// the literal 0 alone types them int4, too small for a 30-day budget.
const setPolicySQL = `
UPDATE webhook_subscriptions
SET policy = $2, max_in_flight = NULLIF($3, 0), auto_recover = $4, probing = probing AND $4 AND $2 = 'ordered',
    max_requests_per_second = NULLIF($5, 0::float8), throttle_next_at = CASE WHEN $5 = 0 THEN NULL ELSE throttle_next_at END,
    retry_base_ms = NULLIF($6::bigint, 0), retry_max_ms = NULLIF($7::bigint, 0), retry_budget_ms = NULLIF($8::bigint, 0),
    max_batch = NULLIF($9, 0),
    updated_at = now()
WHERE id = $1`

// newPolicy returns the policy of a new subscription: the defaults changed
// by p, within l.
func newPolicy(p *PolicyParams, l *Limits) (Policy, error) {
	if err := p.validate(); err != nil {
		return Policy{}, err
	}
	if p == nil {
		return Policy{Name: PolicyOrdered}, nil
	}
	pol, err := Policy{Name: PolicyOrdered}.with(p)
	if err != nil {
		return pol, err
	}
	return pol, pol.checkLimits(l)
}

// writePolicy stores pol as subscription id's policy.
func writePolicy(ctx context.Context, tx pgx.Tx, id uuid.UUID, pol *Policy) error {
	if _, err := tx.Exec(ctx, setPolicySQL, id, pol.Name, pol.MaxInFlight, pol.AutoRecover, pol.MaxRequestsPerSecond,
		pol.RetryBase.Milliseconds(), pol.RetryMax.Milliseconds(), pol.RetryBudget.Milliseconds(), pol.MaxBatch); err != nil {
		return fmt.Errorf("set policy of %s: %w", id, err)
	}
	return nil
}

// setPolicy changes the policy of subscription id by p in tx, within l. It
// locks the row first, so concurrent changes are checked one after the
// other against what the other stored. p has been validated.
func setPolicy(ctx context.Context, tx pgx.Tx, id uuid.UUID, p *PolicyParams, l *Limits) error {
	if p.empty() {
		return nil
	}
	var cur Policy
	sc := ScanPolicy(&cur)
	err := tx.QueryRow(ctx, `SELECT `+PolicyColumns+` FROM webhook_subscriptions s WHERE s.id = $1 FOR NO KEY UPDATE`, id).Scan(sc.Dest()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("read policy of %s: %w", id, err)
	}
	sc.Done()
	n, err := cur.with(p)
	if err != nil {
		return err
	}
	if p.RetryBudget != nil {
		if err := n.checkLimits(l); err != nil {
			return err
		}
	}
	return writePolicy(ctx, tx, id, &n)
}
