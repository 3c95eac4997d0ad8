package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// subRow is the subscription as a step reads it, locked.
type subRow struct {
	owner, space string
	target       outbound.Target
	tokenID      *uuid.UUID
	status       string
	probing      bool
	failing      bool
	pol          webhooks.Policy
	now          time.Time
	// mine: the lease is this job's; leaseLive: some sender's lease is
	// live (unexpired, and its process alive).
	mine, leaseLive bool
	// throttleNext is when the next request may start (throttle_next_at).
	throttleNext *time.Time
	// keeperWake is when the job that comes back for an unordered
	// subscription's retries wakes (keeper_wake_at).
	keeperWake *time.Time
	// transform is the CEL expression whose value is sent instead of each
	// event's envelope; "" for none.
	transform string
}

// active says whether the subscription is sent to: active, or probed.
func (s *subRow) active() bool { return s.status == webhooks.StatusActive || s.probing }

// lockSubSQL locks the subscription, reads what its requests need and says
// whether its lease is live: unexpired, naming a job (a lease without one
// was reserved for whichever delivery job runs first, see reserve), and
// either this job's ($2), of this process ($3), of a process outside
// liveness, or of a process whose lock is held. Only an unexpired lease of
// another process pays for the liveness check.
var lockSubSQL = `SELECT ` + subColumns("$2", "$3", "$4") + `
FROM webhook_subscriptions s WHERE id = $1 FOR NO KEY UPDATE`

// subColumns is what lockSubSQL reads of subscription s for the job named
// by the SQL expression job of the process owner, with the liveness
// settle time settle.
func subColumns(job, owner, settle string) string {
	return `owner, space, url, secret, CASE WHEN previous_secret_until > now() THEN coalesce(previous_secret, '') ELSE '' END,
       headers, destination_kind, destination, token_id, status, probing, failing_since IS NOT NULL,
       ` + lease.MineSQL(job) + `,
       ` + lease.LiveForSenderSQL(job, owner, settle) + `,
       now(), throttle_next_at, keeper_wake_at, ` + webhooks.PolicyColumns + `, coalesce(transform, '')`
}

// stepTx is one step's transaction: the sender it runs for, the
// subscription it locked, and the metric results it counts after the
// commit.
type stepTx struct {
	s       *sender
	tx      pgx.Tx
	sub     subRow
	results []string
	// leaseFor is how long from now the lease runs after this step.
	leaseFor time.Duration
}

// step records the last batch's outcomes (those the recorder has not),
// then decides what comes next and, if it is a batch, claims it: in a
// group with the steps of other senders that come at the same time when it
// can (steps), otherwise alone. Its metric results are counted once its
// transaction committed.
func (s *sender) step(ctx context.Context, last *batch) (p plan, err error) {
	s.d.rec.settle(last)
	select {
	case <-s.wake:
	default:
	}
	if ctx.Err() == nil && !s.alone && (last != nil || s.idled) && groupable(last) {
		if p, ok, err := s.d.steps.step(s, last); ok {
			return p, err
		}
	}
	return s.stepAlone(ctx, last)
}

// stepAlone is a step in a transaction of its own.
func (s *sender) stepAlone(ctx context.Context, last *batch) (p plan, err error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	tx, err := s.d.pool.Begin(ctx)
	if err != nil {
		return p, fmt.Errorf("deliver %s: begin: %w", s.subID, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	t := &stepTx{s: s, tx: tx, leaseFor: s.d.cfg.lease()}
	if p, err = t.run(ctx, last); err != nil {
		return p, err
	}
	if err = tx.Commit(ctx); err != nil {
		return p, fmt.Errorf("deliver %s: commit: %w", s.subID, err)
	}
	s.d.metrics.step()
	for _, r := range t.results {
		s.d.metrics.delivery(r)
	}
	return p, nil
}

// run takes the step's decisions in order: lock the subscription; record
// the last batch (and take the lease, unless another live sender holds
// it); stop if the subscription is gone or disabled; then claim the next
// batch, or say why there is none.
func (t *stepTx) run(ctx context.Context, last *batch) (plan, error) {
	found, err := t.lock(ctx)
	if err != nil || !found {
		return plan{stop: true}, err // deleted: its deliveries went with it
	}
	t.s.alone = !t.sub.groupable()
	if !t.sub.mine && t.sub.leaseLive {
		// Another live sender: what this one sent is recorded once, and it
		// stops (its claims were taken over when it was judged dead).
		return plan{stop: true}, t.recordDelivered(ctx, last, false)
	}
	if err := t.record(ctx, last); err != nil {
		return plan{}, err
	}
	if !t.sub.active() {
		return plan{stop: true}, t.setLease(ctx, nil)
	}
	if w := t.throttleWait(); w > 0 {
		return t.hold(ctx, w)
	}
	return t.next(ctx)
}

// lock locks and reads the subscription; false if it was deleted.
func (t *stepTx) lock(ctx context.Context) (bool, error) {
	me := t.s.me
	row := t.tx.QueryRow(ctx, lockSubSQL, t.s.subID, me.jobID, me.owner, t.s.d.cfg.LivenessSettle.Milliseconds())
	err := t.sub.scan(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deliver %s: lock subscription: %w", t.s.subID, err)
	}
	return true, nil
}

// scan reads subColumns from row, after the columns in before.
func (s *subRow) scan(row pgx.Row, before ...any) error {
	ps := webhooks.ScanPolicy(&s.pol)
	dest := append(before, &s.owner, &s.space, &s.target.URL, &s.target.Secret, &s.target.PreviousSecret, &s.target.Headers,
		&s.target.Kind, &s.target.Config, &s.tokenID, &s.status, &s.probing, &s.failing, &s.mine, &s.leaseLive, &s.now, &s.throttleNext, &s.keeperWake)
	if err := row.Scan(append(append(dest, ps.Dest()...), &s.transform)...); err != nil {
		return err
	}
	ps.Done()
	return nil
}

// throttleWait is how long the next request must wait for the throttle.
func (t *stepTx) throttleWait() time.Duration {
	s := &t.sub
	if s.pol.MaxRequestsPerSecond <= 0 || s.throttleNext == nil {
		return 0
	}
	return max(s.throttleNext.Sub(s.now), 0)
}

// setLease keeps the lease for d from now, or gives it up (nil).
func (t *stepTx) setLease(ctx context.Context, d *time.Duration) error {
	if d == nil {
		return lease.Release(ctx, t.tx, t.s.subID)
	}
	return lease.Set(ctx, t.tx, t.s.subID, t.s.me.jobID, t.s.me.owner, *d)
}

// hold keeps the lease through a wait of w and an attempt after it.
func (t *stepTx) hold(ctx context.Context, w time.Duration) (plan, error) {
	d := w + t.s.d.cfg.Timeout + leaseMargin
	return plan{wait: max(w, time.Millisecond)}, t.setLease(ctx, &d)
}

// claimOrderedSQL reads the subscription's lowest pending deliveries.
const claimOrderedSQL = `
SELECT event_seq, event_id, attempts, first_attempt_at, next_attempt_at, resent_at FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' ORDER BY event_seq LIMIT $2`

// claimDueSQL reads the subscription's pending deliveries that are due,
// oldest due first (a retry by its next attempt, a new one by its
// creation).
const claimDueSQL = `
SELECT event_seq, event_id, attempts, first_attempt_at, next_attempt_at, resent_at FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' AND coalesce(next_attempt_at, created_at) <= now()
ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT $2`

// next claims the next batch and decides the owner's right to it. The
// lease was taken (or kept) by record. Nothing pending leaves the sender
// idle; an ordered head that waits for its retry holds the lease through
// the wait; a used-up slice yields.
func (t *stepTx) next(ctx context.Context) (plan, error) {
	want := t.want()
	sqlText := claimOrderedSQL
	if t.sub.pol.Name == webhooks.PolicyUnordered {
		sqlText = claimDueSQL
	}
	rows, err := t.tx.Query(ctx, sqlText, t.s.subID, want)
	if err != nil {
		return plan{}, fmt.Errorf("deliver %s: claim: %w", t.s.subID, err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*delivery, error) {
		d := &delivery{}
		err := r.Scan(&d.seq, &d.eventID, &d.attempts, &d.firstAttempt, &d.nextAt, &d.resentAt)
		return d, err
	})
	if err != nil {
		return plan{}, fmt.Errorf("deliver %s: claim: %w", t.s.subID, err)
	}
	if p, decided, err := t.unsendable(ctx, items); decided {
		return p, err
	}
	return t.prepare(ctx, items, len(items) < want)
}

// want is how many deliveries the step claims.
func (t *stepTx) want() int {
	s, cfg := &t.sub, &t.s.d.cfg
	if s.status != webhooks.StatusActive || t.s.sliceLeft() <= 0 {
		return 1 // a probe is the head alone; past the slice, only look
	}
	return max(cfg.BatchSize, s.pol.MaxBatch)
}

// unsendable decides the plan when the claimed items are not sent now:
// nothing pending leaves the sender idle; an ordered head that waits for
// its retry holds the lease through the wait; a used-up slice yields.
// decided is false when the items are to be sent.
func (t *stepTx) unsendable(ctx context.Context, items []*delivery) (p plan, decided bool, err error) {
	s := &t.sub
	switch {
	case len(items) == 0 && s.pol.Name == webhooks.PolicyUnordered:
		p, err = t.untilDue(ctx)
	case len(items) == 0:
		p = plan{idle: true}
	case items[0].nextAt != nil && items[0].nextAt.After(s.now):
		p, err = t.hold(ctx, items[0].nextAt.Sub(s.now)) // the ordered head waits for its retry
	case t.s.sliceLeft() <= 0:
		p = plan{yield: true}
	default:
		return plan{}, false, nil
	}
	return p, true, err
}

// untilDue is the plan of an unordered sender with nothing due: wait, with
// the lease and open to wake-ups, for a retry due within the slice;
// otherwise idle (its release makes it the keeper of later retries), with
// a linger that ends when the retry falls due: a linger is bounded by the
// job's run, not the slice, and would otherwise sleep past it.
func (t *stepTx) untilDue(ctx context.Context) (plan, error) {
	var due *time.Time
	if err := t.tx.QueryRow(ctx, nextDueSQL, t.s.subID).Scan(&due); err != nil {
		return plan{}, fmt.Errorf("deliver %s: next due: %w", t.s.subID, err)
	}
	if due == nil {
		return plan{idle: true}, nil
	}
	if w := due.Sub(t.sub.now); w >= t.s.sliceLeft() {
		return plan{idle: true, retryIn: max(w, time.Millisecond)}, nil
	}
	p, err := t.hold(ctx, due.Sub(t.sub.now))
	p.wakeable = true
	return p, err
}

// prepare reads the claimed deliveries' events, decides the owner's right
// to receive them and builds the batch's requests. A refusal makes every
// claimed delivery dead without a request; an event that left the log
// (retention) disables the subscription with cause gap, once the ones
// before it are sent.
func (t *stepTx) prepare(ctx context.Context, items []*delivery, drained bool) (plan, error) {
	rights := t.sub.rights()
	decidedAt := time.Now()
	dec, err := authz.Allowed(ctx, t.tx, &rights)
	if err != nil {
		return plan{}, fmt.Errorf("deliver %s: authz: %w", t.s.subID, err)
	}
	if !dec.Allowed {
		return plan{}, t.refuse(ctx, items, "not allowed: "+dec.Reason)
	}
	if err := t.readEvents(ctx, items); err != nil {
		return plan{}, err
	}
	return t.build(ctx, items, decidedAt, drained)
}

// rights is what a request of the subscription needs: its owner's right
// to receive its space's events, through its token if it has one.
func (s *subRow) rights() authz.Request {
	return authz.Request{Action: authz.ActionWebhookDeliver, Principal: s.owner, Token: s.tokenID, Space: s.space}
}

// build makes the batch of items, whose events were read and whose rights
// were decided at decidedAt. An event that left the log (retention)
// disables the subscription with cause gap, once the ones before it are
// sent.
func (t *stepTx) build(ctx context.Context, items []*delivery, decidedAt time.Time, drained bool) (plan, error) {
	s := &t.sub
	for i, d := range items {
		if d.ev == nil {
			if i == 0 || s.pol.Name == webhooks.PolicyUnordered {
				return plan{stop: true}, t.gap(ctx, d.seq)
			}
			items, drained = items[:i], false // sent first; the gap is the next batch's head
			break
		}
	}
	b := &batch{target: s.target, ordered: s.pol.Name != webhooks.PolicyUnordered, inFlight: s.pol.MaxInFlight,
		rights: s.rights(), decidedAt: decidedAt, until: time.Now().Add(t.leaseFor), drained: drained,
		eager: s.status == webhooks.StatusActive && !s.probing && !s.failing}
	if r := s.pol.MaxRequestsPerSecond; r > 0 {
		b.every = time.Duration(float64(time.Second) / r)
		b.next = time.Now()
	}
	var err error
	if b.requests, err = t.requests(items); err != nil {
		return plan{}, err
	}
	return plan{batch: b}, nil
}

// requests groups items into the batch's requests: one per delivery, or,
// for a subscription with max_batch, up to that many consecutive ones per
// request. A delivery whose retry is scheduled (the head of a request that
// failed) goes alone: a batch that fails is retried from its first event
// alone, so that a bad event further in cannot keep its neighbours from
// being delivered, and batching resumes once that head is delivered.
func (t *stepTx) requests(items []*delivery) ([]*request, error) {
	s := &t.sub
	probe := s.status != webhooks.StatusActive
	var out []*request
	for i := 0; i < len(items); {
		n := 1
		if s.pol.MaxBatch > 0 && items[i].nextAt == nil {
			for n < s.pol.MaxBatch && i+n < len(items) && items[i+n].nextAt == nil {
				n++
			}
		}
		r := &request{items: items[i : i+n], probe: probe}
		var err error
		if s.pol.MaxBatch > 0 {
			r.msg, err = outbound.BatchMessage(t.s.subID, events(r.items))
		} else {
			r.msg, err = outbound.SingleMessage(items[i].ev)
		}
		if err != nil {
			return nil, fmt.Errorf("deliver %s: %w", t.s.subID, err)
		}
		if s.transform != "" {
			t.shape(r)
		}
		r.msg.Resent = resent(r.items)
		out = append(out, r)
		i += n
	}
	return out, nil
}

// resent is the latest time items were resent, zero if none was: a
// broker that drops repeats takes a resend for a new message.
func resent(items []*delivery) time.Time {
	var at time.Time
	for _, d := range items {
		if d.resentAt != nil && d.resentAt.After(at) {
			at = *d.resentAt
		}
	}
	return at
}

func events(items []*delivery) []*sync.Event {
	out := make([]*sync.Event, len(items))
	for i, d := range items {
		out[i] = d.ev
	}
	return out
}

// shape replaces r's body with its events' transformed forms: one body,
// or for a subscription with max_batch a JSON array of them. A transform
// that fails on any of its events leaves r failed before it is sent
// (shapeErr): an attempt with the error, retried by the policy.
func (t *stepTx) shape(r *request) {
	s, d := &t.sub, t.s.d
	prg, err := d.exprs.Program(t.s.subID, eventexpr.Transform, s.transform)
	if err != nil {
		r.shapeErr = err
		return
	}
	bodies := make([]json.RawMessage, len(r.items))
	for i, it := range r.items {
		if bodies[i], err = prg.Body(eventexpr.NewInput(it.ev)); err != nil {
			r.shapeErr = fmt.Errorf("event %d: %w", it.seq, err)
			return
		}
	}
	if s.pol.MaxBatch > 0 {
		msg, err := outbound.ShapedBatchMessage(t.s.subID, events(r.items), bodies)
		if err != nil {
			r.shapeErr = err
			return
		}
		r.msg = msg
		return
	}
	r.msg = outbound.ShapedMessage(r.items[0].ev, bodies[0])
}
