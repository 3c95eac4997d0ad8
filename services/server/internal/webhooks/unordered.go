package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// The unordered policy sends up to max_in_flight deliveries of a
// subscription at once, from any number of jobs and processes. Its unit of
// exclusion is the delivery, not the subscription: a sender claims one
// delivery (claim_job_id, claim_owner, claim_until, like the subscription's
// pump claim) in a short transaction that holds the subscription's row
// lock, so claims of one subscription are counted and taken one after the
// other and max_in_flight holds over every job
// (TestUnordered_RespectsMaxInFlight). A claim is live until claim_until
// unless its process's liveness lock is free; a dead process's deliveries
// are taken over at once. Each outcome is recorded once: a 2xx only moves a
// pending delivery, and a failure only ends its claim if that is still the
// recording job's (TestUnordered_CompetingJobsSendEachDeliveryOnce). A
// delivery is sent twice only when its sender dies (or its process is
// judged dead) between the receiver's 2xx and the record.
//
// The subscription's pump claim names its keeper: the job that comes back
// for retries that are not due yet. A job that ends while others still send
// leaves the decision to them; the last one becomes the keeper and snoozes
// until the earliest delivery is due, unless a keeper already comes back by
// then.

// claimableSQL is true for a pending delivery that nobody sends now: it
// has no claim, the claim expired, or the claim's process has ended its
// session ($2: this process's owner, $3: LivenessSettle in ms).
var claimableSQL = `CASE WHEN claim_until IS NULL OR claim_until <= now() THEN true
     WHEN claim_owner IS NULL OR claim_owner = $2 THEN false
     ELSE ` + liveness.GoneSQL("claim_owner", "$3") + ` END`

// liveClaimsSQL counts the subscription's live delivery claims, all and
// those of jobs other than $4.
var liveClaimsSQL = `
SELECT count(*), count(*) FILTER (WHERE claim_job_id <> $4) FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' AND claim_until > now() AND NOT (` + claimableSQL + `)`

// dueSQL finds the next due delivery nobody sends, oldest due first (a
// retry by its next attempt, a new one by its creation), through
// webhook_deliveries_due, and locks it.
var dueSQL = `
SELECT event_seq, event_id, next_attempt_at FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' AND coalesce(next_attempt_at, created_at) <= now() AND ` + claimableSQL + `
ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT 1 FOR UPDATE`

// nextDueSQL is when the keeper must come back: the earliest due time of a
// delivery nobody sends, or the end of a live claim whose sender might not
// record it.
var nextDueSQL = `
SELECT least(
    (SELECT coalesce(next_attempt_at, created_at) FROM webhook_deliveries
     WHERE subscription_id = $1 AND status = 'pending' AND ` + claimableSQL + `
     ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT 1),
    (SELECT min(claim_until) FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending' AND claim_until > now()))`

// claimDeliverySQL makes $3 (of process $4) the sender of one delivery
// until $5, starts the budget, moves the throttle ($6, if set) and returns
// the custom headers.
const claimDeliverySQL = `
WITH c AS (
    UPDATE webhook_deliveries SET claim_job_id = $3, claim_owner = NULLIF($4::text, ''), claim_until = $5,
        first_attempt_at = coalesce(first_attempt_at, now())
    WHERE subscription_id = $1 AND event_seq = $2
), th AS (
    UPDATE webhook_subscriptions SET throttle_next_at = $6 WHERE id = $1 AND $6::timestamptz IS NOT NULL
)
SELECT headers FROM webhook_subscriptions WHERE id = $1`

// workUnordered runs the senders of an unordered subscription in this job:
// it claims due deliveries while a slot is free and its slice lasts, sends
// each in its own goroutine and records each outcome in its own
// transaction, waits for all of them, and then decides whether the job
// comes back (keepUnordered).
func (d *Deliverer) workUnordered(ctx context.Context, me sender, subID uuid.UUID, start time.Time) error {
	done := make(chan error, MaxMaxInFlight)
	inFlight, stopped := 0, false
	var firstErr error
	for {
		var n next
		if !stopped && firstErr == nil && time.Since(start) < d.cfg.Slice {
			var err error
			n, err = d.inTx(ctx, me, subID, func(t *stepTx) (next, error) { return t.claimUnordered(ctx) })
			if err != nil {
				firstErr = err
			}
		} else {
			stopped = true
		}
		stopped = stopped || n.stop
		if n.send != nil {
			inFlight++
			go func(c *claim) { done <- d.sendAndRecord(ctx, me, c) }(n.send)
			continue
		}
		if inFlight == 0 {
			if !stopped && firstErr == nil && n.pause > 0 && d.pauseWithin(ctx, start, n.pause) {
				continue
			}
			break
		}
		// Wait for a send of this job to end (a free slot, perhaps a due
		// retry) or for the throttle.
		var throttle <-chan time.Time
		if n.pause > 0 {
			throttle = time.After(n.pause)
		}
		select {
		case err := <-done:
			inFlight--
			firstErr = errors.Join(firstErr, err)
		case <-throttle:
		}
	}
	if firstErr != nil {
		return firstErr
	}
	n, err := d.inTx(ctx, me, subID, func(t *stepTx) (next, error) { return t.keepUnordered(ctx) })
	if err != nil {
		return err
	}
	if n.snooze != nil {
		return river.JobSnooze(*n.snooze)
	}
	return nil
}

// sendAndRecord makes one attempt of a claimed delivery and records its
// outcome in a transaction of its own. The record runs even when the job is
// being cancelled, so the claim ends with the attempt.
func (d *Deliverer) sendAndRecord(ctx context.Context, me sender, c *claim) error {
	o := d.send(ctx, c)
	rctx := context.WithoutCancel(ctx)
	_, err := d.inTx(rctx, me, c.subID, func(t *stepTx) (next, error) {
		r, _, err := d.record(rctx, t.tx, o)
		if err == nil {
			t.results = append(t.results, r)
		}
		return next{}, err
	})
	return err
}

// liveClaims counts the subscription's live delivery claims: all, and
// those of other jobs.
func (t *stepTx) liveClaims(ctx context.Context) (all, others int, err error) {
	err = t.tx.QueryRow(ctx, liveClaimsSQL, t.subID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds(), t.me.jobID).Scan(&all, &others)
	if err != nil {
		return 0, 0, fmt.Errorf("deliver %s: count claims: %w", t.subID, err)
	}
	return all, others, nil
}

// claimUnordered claims the next due delivery if the subscription has a
// free slot and its throttle allows a request now. It returns stop when the
// subscription is no longer an active unordered one, a pause for the
// throttle, or nothing when every slot is taken or nothing is due.
func (t *stepTx) claimUnordered(ctx context.Context) (next, error) {
	s, _, err := t.lockAndRecord(ctx, nil)
	if err != nil || s == nil || s.status != StatusActive || s.pol.Name != PolicyUnordered {
		return next{stop: true}, err
	}
	all, _, err := t.liveClaims(ctx)
	if err != nil || all >= s.pol.MaxInFlight {
		return next{}, err
	}
	if w := s.throttleWait(); w > 0 {
		return next{pause: w}, nil
	}
	for range maxRefusalsPerStep {
		var h head
		err := t.tx.QueryRow(ctx, dueSQL, t.subID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds()).Scan(&h.seq, &h.eventID, &h.nextAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return next{}, nil
		}
		if err != nil {
			return next{}, fmt.Errorf("deliver %s: find due delivery: %w", t.subID, err)
		}
		ev, v, err := t.judge(ctx, s, &h)
		switch {
		case err != nil:
			return next{}, err
		case v == verdictGap:
			return next{stop: true}, nil
		case v == verdictRefused:
			continue
		}
		return t.claimDelivery(ctx, s, &h, ev)
	}
	return next{}, nil
}

// claimDelivery makes the job the sender of one delivery and returns the
// send.
func (t *stepTx) claimDelivery(ctx context.Context, s *subRow, h *head, ev *sync.Event) (next, error) {
	body, err := json.Marshal(ev.Envelope())
	if err != nil {
		return next{}, fmt.Errorf("deliver %s: envelope %d: %w", t.subID, h.seq, err)
	}
	var headers map[string]string
	if err := t.tx.QueryRow(ctx, claimDeliverySQL, t.subID, h.seq, t.me.jobID, t.me.owner,
		s.now.Add(t.d.cfg.Timeout+leaseMargin), s.throttleAfter()).Scan(&headers); err != nil {
		return next{}, fmt.Errorf("deliver %s: claim %d: %w", t.subID, h.seq, err)
	}
	job := t.me.jobID
	return next{send: &claim{subID: t.subID, seq: h.seq, eventID: h.eventID, operational: isOperational(ev.Type), url: s.url, secret: s.secret,
		previousSecret: s.prevSecret, headers: headers, body: body, pol: s.pol, sched: t.d.schedule(&s.pol), claimJob: &job}}, nil
}

// keepUnordered decides, once a job's sends have ended, whether it comes
// back: not while other jobs still send (the last of them decides), nor
// when nothing is pending; otherwise it becomes the keeper and snoozes
// until the next delivery is due (or the throttle allows it), unless the
// keeper of another job comes back by then. A subscription whose policy
// changed is handed to the ordered sender at once.
func (t *stepTx) keepUnordered(ctx context.Context) (next, error) {
	s, _, err := t.lockAndRecord(ctx, nil)
	if err != nil || s == nil {
		return next{}, err
	}
	if s.pol.Name != PolicyUnordered {
		zero := time.Duration(0)
		return next{snooze: &zero}, nil
	}
	if s.status != StatusActive {
		if s.mine {
			return next{}, t.release(ctx)
		}
		return next{}, nil
	}
	if _, others, err := t.liveClaims(ctx); err != nil || others > 0 {
		return next{}, err
	}
	var wake *time.Time
	if err := t.tx.QueryRow(ctx, nextDueSQL, t.subID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds()).Scan(&wake); err != nil {
		return next{}, fmt.Errorf("deliver %s: next due: %w", t.subID, err)
	}
	if wake == nil {
		if s.mine {
			return next{}, t.release(ctx)
		}
		return next{}, nil
	}
	at := later(*wake, s.now.Add(s.throttleWait()))
	lease := t.d.cfg.Timeout + leaseMargin
	if !s.mine && s.pumpLive && s.pumpUntil != nil && !s.pumpUntil.Add(-lease).After(at) {
		return next{}, nil // the keeper comes back in time
	}
	return t.hold(ctx, at.Sub(s.now), at.Add(lease))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
