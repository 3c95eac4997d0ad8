package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
)

// Resend, Recover and EnableFromBacklog put deliveries back in front of a
// subscription's sender. Each
// makes deliveries pending in one transaction and inserts a delivery job in
// it; the sender does the rest as for any pending delivery: it checks the
// owner's rights at send time, signs with the subscription's secrets and
// sends with the event's id as webhook-id, so a receiver drops a repeat by
// that id. An ordered subscription sends its pending deliveries in seq
// order, so a delivery made pending again is sent before every newer
// pending one; one already in flight is not overtaken.

var (
	// ErrDeliveryNotFound is returned by Resend for a seq the subscription
	// has no delivery of.
	ErrDeliveryNotFound = errors.New("webhook delivery not found")
	// ErrConflict is returned when the subscription or the delivery is in
	// a state that refuses the request: a resend of a pending delivery or
	// of an event retention removed, a resend or a recover on a disabled
	// subscription.
	ErrConflict = errors.New("webhook subscription state conflict")
)

// MaxRecoverSeqs bounds the seqs one Recover reads. A recover reads its
// range in one transaction, so that the sender finds every recovered
// delivery at once and sends them in order, and that transaction holds the
// subscription's row; the bound keeps it to a few seconds. A longer range
// is recovered by several calls.
const MaxRecoverSeqs = 100_000

// recoverBatch is how many events one read of a recover or of a backlog
// takes, as many as a round reads by default.
const recoverBatch = 1000

// dbTimeout bounds the reads a recover makes outside its transaction.
const dbTimeout = 10 * time.Second

// JobInserter inserts a River job inside the caller's transaction, so the
// job commits with the deliveries it is to send. *river.Client[pgx.Tx] is
// one, also an insert-only client (no queues or workers). It is safe for
// concurrent use.
type JobInserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// sendable is a subscription locked for a resend or a recover.
type sendable struct {
	owner, space string
	tokenID      *uuid.UUID
	status       string
	created      time.Time
}

// lockSendable locks the subscription's row and checks that it may get
// deliveries: it exists, it is active, and its owner (with the token it was
// made with) may still receive the space's events, the check every send
// makes (authz.ActionWebhookDeliver). Holding the row keeps the sender's
// next step waiting until the caller commits.
func lockSendable(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*sendable, error) {
	s := &sendable{}
	err := tx.QueryRow(ctx, `SELECT owner, space, token_id, status, created_at FROM webhook_subscriptions WHERE id = $1 FOR NO KEY UPDATE`, id).
		Scan(&s.owner, &s.space, &s.tokenID, &s.status, &s.created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock webhook subscription %s: %w", id, err)
	}
	if s.status != StatusActive {
		return nil, fmt.Errorf("%w: subscription %s is disabled; enable it first (from the backlog to keep what it missed)", ErrConflict, id)
	}
	d, err := authz.Allowed(ctx, tx, &authz.Request{Action: authz.ActionWebhookDeliver, Principal: s.owner, Token: s.tokenID, Space: s.space})
	if err != nil {
		return nil, fmt.Errorf("check the owner of %s: %w", id, err)
	}
	if !d.Allowed {
		return nil, fmt.Errorf("%w: the owner %q may not receive the events of %q: %s", ErrForbidden, s.owner, s.space, d.Reason)
	}
	return s, nil
}

// inTx runs fn in a transaction of q, which must be able to begin one.
func inTx(ctx context.Context, q authz.Querier, fn func(tx pgx.Tx) error) error {
	db, ok := q.(interface {
		Begin(ctx context.Context) (pgx.Tx, error)
	})
	if !ok {
		return errors.New("webhooks: the querier cannot begin a transaction")
	}
	return pgx.BeginFunc(ctx, db, fn)
}

// eventAtSeq reads the event at seq, or nil when it is not in the log.
func eventAtSeq(ctx context.Context, tx pgx.Tx, src sync.EventSource, seq int64) (*sync.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	evs, err := src.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: seq - 1, Limit: 1})
	if err != nil || len(evs) == 0 || evs[0].Seq != seq {
		return nil, err
	}
	return &evs[0], nil
}

// retention is what the log holds, as one transaction sees it.
type retention struct {
	// low is the lowest seq retention kept: every seq below it is gone.
	low int64
	// oldest is the event at low, nil if the log holds none.
	oldest *sync.Event
	// head is the newest seq handed out.
	head int64
}

// readRetention reads the oldest event first: that holds the log's
// partitions until tx ends, so no partition is dropped between that read,
// the retention mark and the reads of the caller after them.
func readRetention(ctx context.Context, tx pgx.Tx, src sync.EventSource) (*retention, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	evs, err := src.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: 0, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("read the oldest event: %w", err)
	}
	r := &retention{}
	if r.low, err = src.LowSeq(ctx, tx); err != nil {
		return nil, fmt.Errorf("read the retention mark: %w", err)
	}
	if len(evs) > 0 {
		r.oldest = &evs[0]
	}
	if err := tx.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&r.head); err != nil {
		return nil, fmt.Errorf("read the head: %w", err)
	}
	return r, nil
}

// firstSeqAtOrAfter returns the lowest retained seq committed at or after
// t, or r.head+1 if none. It bisects the retained seqs, one event read per
// step: commit times grow with seqs (sync.Event.CommittedAt), and the log
// has no index by time.
func firstSeqAtOrAfter(ctx context.Context, tx pgx.Tx, src sync.EventSource, r *retention, t time.Time) (int64, error) {
	lo, hi := r.low, r.head+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		ev, err := eventAtSeq(ctx, tx, src, mid)
		if err != nil {
			return 0, fmt.Errorf("read event %d: %w", mid, err)
		}
		if ev == nil {
			return 0, fmt.Errorf("event %d is missing from the retained log", mid)
		}
		if ev.CommittedAt.Before(t) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// recoverSQL makes the subscription's ($5) deliveries of one batch of
// events pending, by the round's own matching (matchSQL) with its current
// filter: dead and skipped ones again, if $6, and new ones for matching
// events that have none. Delivered and pending ones are left as they are.
// It returns how many it reset and how many it created.
const recoverSQL = `
WITH ` + matchSQL + `, mine AS (
    SELECT seq, id FROM hit WHERE subscription_id = $5
), reset AS (
    UPDATE webhook_deliveries d
    SET status = 'pending', created_at = now(), first_attempt_at = NULL, next_attempt_at = NULL, finished_at = NULL, last_error = NULL
    FROM mine WHERE $6 AND d.subscription_id = $5 AND d.event_seq = mine.seq AND d.status IN ('dead', 'skipped')
    RETURNING 1
), ins AS (
    INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id)
    SELECT $5, mine.seq, mine.id FROM mine
    WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.subscription_id = $5 AND d.event_seq = mine.seq)
    ON CONFLICT (subscription_id, event_seq) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM reset), (SELECT count(*) FROM ins)`

// pendingFrom makes pending the subscription's deliveries of the events of
// space with seqs in r that recoverSQL selects and its filter (if any)
// passes, reading the log in batches, and returns how many it reset and
// how many it created.
func pendingFrom(ctx context.Context, tx pgx.Tx, src sync.EventSource, id uuid.UUID, space string, r sync.SeqRange, reset bool) (nReset, nCreated int64, err error) {
	keep, err := filterOf(ctx, tx, id)
	if err != nil {
		return 0, 0, err
	}
	for after := r.From - 1; after < r.To; {
		var rs, cr int64
		if after, rs, cr, err = pendingBatch(ctx, tx, src, id, space, after, r.To, reset, keep); err != nil {
			return nReset, nCreated, err
		}
		nReset, nCreated = nReset+rs, nCreated+cr
	}
	return nReset, nCreated, nil
}

// pendingBatch is one batch of pendingFrom: the events after after, up to
// to. It returns the last seq it read (to when there was none).
func pendingBatch(ctx context.Context, tx pgx.Tx, src sync.EventSource, id uuid.UUID, space string, after, to int64, reset bool,
	keep func(*sync.Event) bool) (last, nReset, nCreated int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	evs, err := src.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: after, Limit: int(min(recoverBatch, to-after))})
	if err != nil {
		return after, 0, 0, fmt.Errorf("read events after %d: %w", after, err)
	}
	if len(evs) == 0 {
		return to, 0, 0, nil
	}
	var mine []sync.Event
	for _, e := range evs {
		if e.Space == space && e.Seq <= to && keep(&e) {
			mine = append(mine, e)
		}
	}
	last = evs[len(evs)-1].Seq
	if len(mine) == 0 {
		return last, 0, 0, nil
	}
	seqs, ids, spaces, patterns := matchArgs(mine)
	if err := tx.QueryRow(ctx, recoverSQL, seqs, ids, spaces, patterns, id, reset).Scan(&nReset, &nCreated); err != nil {
		return after, 0, 0, fmt.Errorf("make deliveries of %d..%d pending: %w", evs[0].Seq, last, err)
	}
	return last, nReset, nCreated, nil
}

// ResendParams selects the delivery to send again.
type ResendParams struct {
	SubscriptionID uuid.UUID
	Seq            int64
	// Events reads the log: an event retention removed cannot be sent.
	Events sync.EventSource
	// Jobs inserts the delivery job.
	Jobs JobInserter
}

// resendSQL makes one finished delivery pending and due now (its next
// attempt), without a sender's claim, and records when (resent_at). Its
// retry budget starts again, and the pending-age gauge counts it from the
// resend; its creation time, its attempts and their records are kept.
const resendSQL = `
UPDATE webhook_deliveries
SET status = 'pending', resent_at = now(), first_attempt_at = NULL, next_attempt_at = now(), finished_at = NULL, last_error = NULL
WHERE subscription_id = $1 AND event_seq = $2 AND status IN ('delivered', 'dead', 'skipped')
RETURNING subscription_id, event_seq, event_id, status, attempts, created_at, finished_at, next_attempt_at, coalesce(last_error, ''), resent_at`

// Resend makes a delivered, dead or skipped delivery pending again, due
// now, and returns it. The subscription must be active, its owner still
// allowed to receive the space's events, and the event still in the log
// (ErrConflict otherwise). The request it leads to carries the same
// webhook-id as the first, the event's id, unless the subscription sends
// batches (a batch's id covers its events). A broker that drops repeats
// takes it for a new message by its resent_at (outbound.Message.Resent).
func Resend(ctx context.Context, q authz.Querier, p *ResendParams) (*Delivery, error) {
	var d Delivery
	err := inTx(ctx, q, func(tx pgx.Tx) error {
		if _, err := lockSendable(ctx, tx, p.SubscriptionID); err != nil {
			return err
		}
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2`,
			p.SubscriptionID, p.Seq).Scan(&status)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s has no delivery of seq %d: %w", p.SubscriptionID, p.Seq, ErrDeliveryNotFound)
		}
		if err != nil {
			return err
		}
		if status == DeliveryPending {
			return fmt.Errorf("%w: delivery %d is pending already; it is sent, or retried, as it is", ErrConflict, p.Seq)
		}
		ev, err := eventAtSeq(ctx, tx, p.Events, p.Seq)
		if err != nil {
			return fmt.Errorf("read event %d: %w", p.Seq, err)
		}
		if ev == nil {
			return fmt.Errorf("%w: event %d left the log (retention); it cannot be sent again", ErrConflict, p.Seq)
		}
		err = tx.QueryRow(ctx, resendSQL, p.SubscriptionID, p.Seq).Scan(&d.SubscriptionID, &d.Seq, &d.EventID, &d.Status,
			&d.Attempts, &d.CreatedAt, &d.FinishedAt, &d.NextAttemptAt, &d.LastError, &d.ResentAt)
		if err != nil {
			return fmt.Errorf("make delivery %d pending: %w", p.Seq, err)
		}
		return startSender(ctx, tx, p.Jobs, p.SubscriptionID, p.Seq)
	})
	if err != nil {
		return nil, fmt.Errorf("resend %s/%d: %w", p.SubscriptionID, p.Seq, err)
	}
	return &d, nil
}

// RecoverParams selects what Recover makes pending: a seq range (FromSeq)
// or a commit-time range (Since), not both. Without FromSeq and Since the
// range starts at the subscription's creation: its first seq is the first
// committed at or after it. A range that starts before the creation is
// refused unless BeforeCreation says so.
type RecoverParams struct {
	SubscriptionID uuid.UUID
	// FromSeq and ToSeq are the first and last seq, both included; ToSeq
	// 0: up to the head. FromSeq 0: from the subscription's creation.
	FromSeq, ToSeq int64
	// Since and Until bound the events' commit times, Since included and
	// Until excluded; Until zero: up to the head.
	Since, Until time.Time
	// BeforeCreation allows a range that starts before the subscription
	// was created: events its owner never asked for until now.
	BeforeCreation bool

	// fromCreated: FromSeq was filled in from the creation, so a start
	// after the head is an empty range rather than a mistake.
	fromCreated bool
	// Events reads the log.
	Events sync.EventSource
	// Jobs inserts the delivery job.
	Jobs JobInserter
}

func (p *RecoverParams) validate() error {
	bySeq, byTime := p.FromSeq != 0 || p.ToSeq != 0, !p.Since.IsZero() || !p.Until.IsZero()
	switch {
	case bySeq && byTime:
		return fmt.Errorf("%w: give from_seq (and to_seq) or since (and until), not both", ErrInvalid)
	case p.FromSeq < 0:
		return fmt.Errorf("%w: from_seq: want a seq of at least 1", ErrInvalid)
	case p.FromSeq != 0 && p.ToSeq != 0 && p.ToSeq < p.FromSeq:
		return fmt.Errorf("%w: to_seq %d is below from_seq %d", ErrInvalid, p.ToSeq, p.FromSeq)
	case !p.Since.IsZero() && !p.Until.IsZero() && !p.Until.After(p.Since):
		return fmt.Errorf("%w: until must be after since", ErrInvalid)
	}
	return nil
}

// fromCreation fills in where the range starts when it was not given (the
// first seq committed at or after the subscription's creation, for a seq
// range, its creation time for a time range) and refuses a start before
// that unless BeforeCreation is set, naming the field. When retention
// removed every event before the creation, the first retained seq is
// known to be at or after it, but not which removed seqs were: a range
// starting among them is allowed, since it can send no event from before
// the creation (the removed part is reported lost).
func (p *RecoverParams) fromCreation(ctx context.Context, tx pgx.Tx, r *retention, created time.Time) error {
	if !p.Since.IsZero() || !p.Until.IsZero() {
		if p.Since.IsZero() {
			p.Since = created
		}
		keptBefore := r.oldest != nil && r.oldest.CommittedAt.Before(created)
		if p.Since.Before(created) && !p.BeforeCreation && (keptBefore || r.low <= 1) {
			return fmt.Errorf("%w: since: %s is before the subscription was created (%s); set before_creation to recover "+
				"events it was never subscribed to", ErrInvalid, p.Since.UTC().Format(time.RFC3339Nano), created.UTC().Format(time.RFC3339Nano))
		}
		if !p.Until.IsZero() && !p.Until.After(p.Since) {
			return fmt.Errorf("%w: until: must be after the subscription's creation (%s)", ErrInvalid, created.UTC().Format(time.RFC3339Nano))
		}
		return nil
	}
	if p.FromSeq != 0 {
		return p.checkFromSeq(ctx, tx, r, created)
	}
	first, err := firstSeqAtOrAfter(ctx, tx, p.Events, r, created)
	if err != nil {
		return err
	}
	p.FromSeq, p.fromCreated = first, true
	if p.ToSeq != 0 && p.ToSeq < first {
		return fmt.Errorf("%w: to_seq %d is before the subscription's first seq %d", ErrInvalid, p.ToSeq, first)
	}
	return nil
}

// checkFromSeq refuses a FromSeq whose range would send a retained event
// committed before the subscription's creation, unless BeforeCreation is
// set. Commit times grow with seqs, so the first retained event of the
// range tells: one read, and the search for the first seq after the
// creation only to say it in the refusal.
func (p *RecoverParams) checkFromSeq(ctx context.Context, tx pgx.Tx, r *retention, created time.Time) error {
	at := max(p.FromSeq, r.low)
	if p.BeforeCreation || at > r.head {
		return nil
	}
	ev, err := eventAtSeq(ctx, tx, p.Events, at)
	if err != nil {
		return fmt.Errorf("read event %d: %w", at, err)
	}
	if ev == nil || !ev.CommittedAt.Before(created) {
		return nil
	}
	first, err := firstSeqAtOrAfter(ctx, tx, p.Events, r, created)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: from_seq: %d is before the subscription's creation (its first seq is %d); set before_creation "+
		"to recover events it was never subscribed to", ErrInvalid, p.FromSeq, first)
}

// RecoverResult says what Recover did.
type RecoverResult struct {
	// Range is the retained seqs that were searched (Len 0: none).
	Range sync.SeqRange
	// Reset is how many dead or skipped deliveries became pending.
	Reset int64
	// Created is how many deliveries were made for matching events that
	// had none.
	Created int64
	// Lost, for a seq range, is the part of it that retention removed:
	// exactly those seqs (Len 0: none).
	Lost sync.SeqRange
	// LostSince and LostUntil, for a time range, bound the part of it that
	// retention removed: every event committed at or after LostSince and
	// before LostUntil is gone, and none later. Which seqs those were went
	// with them. Zero: nothing was lost.
	LostSince, LostUntil time.Time
}

// Recover makes pending again the subscription's dead and skipped
// deliveries of a range of the log, and makes deliveries for the events of
// the range that match its space and current filter (by the round's
// matching) and have none: events committed while it was disabled, or,
// with BeforeCreation, before it was created. Delivered and pending
// deliveries are left as they are (Resend sends a delivered one again).
// Only retained events can be recovered; the part of the range retention
// removed is reported in the result, and the rest is recovered.
//
// The subscription must be active (ErrConflict) and its owner still allowed
// to receive the space's events (ErrForbidden). Everything is made pending
// in one transaction that holds the subscription's row, so its sender
// finds all of it at once: the deliveries of an ordered subscription go out
// in seq order, before every newer pending one. A range of more than
// MaxRecoverSeqs seqs is refused (ErrInvalid).
func Recover(ctx context.Context, q authz.Querier, params *RecoverParams) (*RecoverResult, error) {
	if err := params.validate(); err != nil {
		return nil, err
	}
	p := *params // fromCreation fills in the start
	res := &RecoverResult{}
	err := inTx(ctx, q, func(tx pgx.Tx) error {
		s, err := lockSendable(ctx, tx, p.SubscriptionID)
		if err != nil {
			return err
		}
		r, err := readRetention(ctx, tx, p.Events)
		if err != nil {
			return err
		}
		if err := p.fromCreation(ctx, tx, r, s.created); err != nil {
			return err
		}
		if p.FromSeq > 0 {
			err = p.seqRange(r, res)
		} else {
			err = p.timeRange(ctx, tx, r, res)
		}
		if err != nil {
			return err
		}
		return p.makePending(ctx, tx, s.space, res)
	})
	if errors.Is(err, ErrInvalid) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", p.SubscriptionID, err)
	}
	return res, nil
}

// seqRange sets res.Range to the retained seqs of FromSeq..ToSeq (up to
// the head when ToSeq is 0 or past it) and res.Lost to the seqs of it that
// retention removed. A FromSeq after the head is refused (ErrInvalid).
func (p *RecoverParams) seqRange(r *retention, res *RecoverResult) error {
	if p.FromSeq > r.head && p.fromCreated {
		res.Range = sync.SeqRange{}
		return nil
	}
	if p.FromSeq > r.head {
		return fmt.Errorf("%w: from_seq %d is after the head of the log (%d)", ErrInvalid, p.FromSeq, r.head)
	}
	to := r.head
	if p.ToSeq > 0 {
		to = min(p.ToSeq, r.head)
	}
	if p.FromSeq < r.low {
		res.Lost = sync.SeqRange{From: p.FromSeq, To: min(to, r.low-1)}
	}
	res.Range = sync.SeqRange{From: max(p.FromSeq, r.low), To: to}
	return nil
}

// timeRange sets res.Range to the retained seqs committed at or after
// Since and before Until (up to the head when Until is zero), and
// res.LostSince and res.LostUntil to the part of that time range retention
// removed (lostTime).
func (p *RecoverParams) timeRange(ctx context.Context, tx pgx.Tx, r *retention, res *RecoverResult) error {
	from, err := firstSeqAtOrAfter(ctx, tx, p.Events, r, p.Since)
	if err != nil {
		return err
	}
	to := r.head
	if !p.Until.IsZero() {
		if to, err = firstSeqAtOrAfter(ctx, tx, p.Events, r, p.Until); err != nil {
			return err
		}
		to--
	}
	res.Range = sync.SeqRange{From: from, To: to}
	res.LostSince, res.LostUntil = p.lostTime(r)
	return nil
}

// lostTime bounds the part of the time range Since..Until that retention
// removed, zero if none: everything committed before the oldest retained
// event is gone, and nothing after it.
func (p *RecoverParams) lostTime(r *retention) (since, until time.Time) {
	if r.low <= 1 {
		return time.Time{}, time.Time{}
	}
	keptFrom := time.Now()
	if r.oldest != nil {
		keptFrom = r.oldest.CommittedAt
	}
	if !p.Until.IsZero() && p.Until.Before(keptFrom) {
		keptFrom = p.Until
	}
	if p.Since.Before(keptFrom) {
		return p.Since, keptFrom
	}
	return time.Time{}, time.Time{}
}

// makePending makes pending the deliveries of res.Range that Recover
// recovers, in the subscription's space, and counts them in res; if any
// became pending it inserts the delivery job. An empty range is reported
// as the zero range; one of more than MaxRecoverSeqs seqs is refused
// (ErrInvalid).
func (p *RecoverParams) makePending(ctx context.Context, tx pgx.Tx, space string, res *RecoverResult) error {
	if res.Range.Len() == 0 {
		res.Range = sync.SeqRange{}
		return nil
	}
	if n := res.Range.Len(); n > MaxRecoverSeqs {
		return fmt.Errorf("%w: the range holds %d seqs (%s), at most %d per call; recover it in parts",
			ErrInvalid, n, res.Range, MaxRecoverSeqs)
	}
	var err error
	if res.Reset, res.Created, err = pendingFrom(ctx, tx, p.Events, p.SubscriptionID, space, res.Range, true); err != nil {
		return err
	}
	if res.Reset+res.Created == 0 {
		return nil
	}
	return startSender(ctx, tx, p.Jobs, p.SubscriptionID, res.Range.From)
}

// EnableBacklogParams selects the subscription EnableFromBacklog enables.
type EnableBacklogParams struct {
	ID uuid.UUID
	// Events reads the log.
	Events sync.EventSource
	// Jobs inserts the delivery job.
	Jobs JobInserter
}

// backlogRow is a disabled subscription as EnableFromBacklog reads it.
type backlogRow struct {
	status, cause, space       string
	lastDelivered, resumeAfter int64
	backlogFrom                *int64
	disabledAt                 *time.Time
}

const lockBacklogSQL = `
SELECT status, coalesce(disabled_cause, ''), space, ` + deliveredThroughSQL + `, resume_after_seq, backlog_from_seq, disabled_at
FROM webhook_subscriptions s WHERE id = $1 FOR NO KEY UPDATE`

// deliveredThroughSQL is subscription s's highest delivered seq: its
// last_delivered_seq, which a sender's step moves, or a later delivery the
// process's recorder already recorded delivered while no step has run
// since (primary-key range read above last_delivered_seq).
const deliveredThroughSQL = `greatest(s.last_delivered_seq, coalesce((SELECT max(d.event_seq) FROM webhook_deliveries d
    WHERE d.subscription_id = s.id AND d.event_seq > s.last_delivered_seq AND d.status = 'delivered'), 0))`

func lockBacklog(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*backlogRow, error) {
	b := &backlogRow{}
	err := tx.QueryRow(ctx, lockBacklogSQL, id).Scan(&b.status, &b.cause, &b.space, &b.lastDelivered, &b.resumeAfter, &b.backlogFrom,
		&b.disabledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("lock webhook subscription %s: %w", id, err)
	}
	return b, nil
}

// start is the first seq of the backlog not yet read: after the mark the
// round left (backlog_from_seq), after the subscription's starting point,
// and at or after next. ok is false when rounds passed nothing while it
// was disabled.
func (b *backlogRow) start(next int64) (int64, bool) {
	if b.backlogFrom == nil {
		return 0, false
	}
	return max(*b.backlogFrom, b.resumeAfter+1, next), true
}

// startAt is start under the round barrier, where read is the consumer's
// cursor: without a mark no round read anything since the disable, so the
// backlog is every event after the cursor (those up to it were matched
// while the subscription was active).
func (b *backlogRow) startAt(next, read int64) int64 {
	if from, ok := b.start(next); ok {
		return from
	}
	return max(read+1, b.resumeAfter+1, next)
}

// reviveSQL makes pending again the deliveries that disabled the
// subscription ($1): the sender that disables it for failing (the head's
// retry budget spent) or for a 410 makes them dead in the same
// transaction, so their finished_at is its disabled_at ($2). Left dead,
// an ordered subscription would resume with a hole where they were.
// Dead deliveries of other causes (a refusal by rights, an earlier
// dead letter) stay dead. Their retry budget starts again.
const reviveSQL = `
UPDATE webhook_deliveries
SET status = 'pending', created_at = now(), first_attempt_at = NULL, next_attempt_at = NULL, finished_at = NULL, last_error = NULL
WHERE subscription_id = $1 AND status = 'dead' AND finished_at = $2`

// revive makes pending the deliveries that disabled b (reviveSQL), if a
// delivery disabled it: causes failing and gone. A gap's event is gone,
// and a manual disable had no delivery to blame.
func (b *backlogRow) revive(ctx context.Context, tx pgx.Tx, id uuid.UUID) (int64, error) {
	if b.disabledAt == nil || (b.cause != CauseFailing && b.cause != CauseGone) {
		return 0, nil
	}
	ct, err := tx.Exec(ctx, reviveSQL, id, *b.disabledAt)
	if err != nil {
		return 0, fmt.Errorf("revive the deliveries that disabled it: %w", err)
	}
	return ct.RowsAffected(), nil
}

// skipLostSQL gives up the pending deliveries whose events retention
// removed: sending them is impossible, and the sender would disable the
// subscription again at the first one.
const skipLostSQL = `
UPDATE webhook_deliveries
SET status = 'skipped', finished_at = now(), next_attempt_at = NULL,
    last_error = 'skipped: the event left the log (retention) before the subscription was enabled'
WHERE subscription_id = $1 AND status = 'pending' AND event_seq < $2`

// activateSQL enables the subscription at $2, keeping its pending
// deliveries.
const activateSQL = `
UPDATE webhook_subscriptions
SET status = 'active', disabled_cause = NULL, disabled_detail = NULL, disabled_at = NULL, updated_at = now(),
    resume_after_seq = $2, backlog_from_seq = NULL, ` + lease.ClearSQL + `
WHERE id = $1`

// EnableFromBacklog re-activates a disabled subscription with what it
// missed: its pending deliveries stay pending, and the events committed
// while it was disabled that match its space and current filter (by the
// round's matching) get deliveries, as long as the log holds them. Pending
// deliveries of events retention removed are skipped, and NotDelivered is
// the range of seqs after the last delivered one that retention removed,
// as Enable reports the range it skips. The deliveries that disabled it
// (for failing or a 410) are pending again, sent first, so an ordered
// subscription resumes without a hole; other dead deliveries stay dead
// (Recover or Resend sends them).
//
// Where the backlog starts is the mark the first round after the disable
// left (backlog_from_seq): every matching event before it got a delivery
// while the subscription was active. The events from the mark on are read
// in batches of their own short transaction while the subscription is
// still disabled, so rounds do not wait for a long backlog; the last part,
// up to the head, is read under the round barrier (atHead) in the
// transaction that enables it, so no round matches an event in between
// against a snapshot where it is disabled.
func EnableFromBacklog(ctx context.Context, q authz.Querier, rounds sync.RoundBarrier, p *EnableBacklogParams) (*EnableResult, error) {
	res := &EnableResult{}
	var next int64
	for done := false; !done; {
		err := inTx(ctx, q, func(tx pgx.Tx) error {
			var err error
			next, done, err = p.backlogBatch(ctx, tx, next, res)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("enable webhook subscription %s from the backlog: %w", p.ID, err)
		}
	}

	err := atHead(ctx, q, rounds, func(tx pgx.Tx, read int64) error {
		b, err := lockBacklog(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if b.status != StatusDisabled {
			res = &EnableResult{}
			return nil
		}
		return p.enableAtHead(ctx, tx, b, b.startAt(next, read), res)
	})
	if err != nil {
		return nil, fmt.Errorf("enable webhook subscription %s from the backlog: %w", p.ID, err)
	}
	return res, nil
}

// backlogBatch makes the deliveries of one batch of the backlog, from next
// on, while the subscription is still disabled, and counts them in res. It
// returns the seq after the batch (next if it read none), and done once
// there is nothing more to read before the barrier: the subscription is
// not disabled, rounds passed nothing while it was, or the batch was short.
func (p *EnableBacklogParams) backlogBatch(ctx context.Context, tx pgx.Tx, next int64, res *EnableResult) (int64, bool, error) {
	b, err := lockBacklog(ctx, tx, p.ID)
	if err != nil {
		return next, false, err
	}
	from, ok := b.start(next)
	if b.status != StatusDisabled || !ok {
		return next, true, nil
	}
	bctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	evs, err := p.Events.EventsAfter(bctx, tx, &sync.EventsAfterParams{AfterSeq: from - 1, Limit: recoverBatch})
	if err != nil {
		return next, false, fmt.Errorf("read events after %d: %w", from-1, err)
	}
	done := len(evs) < recoverBatch // the rest, committed from now on, is read under the barrier
	if len(evs) == 0 {
		return next, done, nil
	}
	r := sync.SeqRange{From: evs[0].Seq, To: evs[len(evs)-1].Seq}
	_, n, err := pendingFrom(ctx, tx, p.Events, p.ID, b.space, r, false)
	if err != nil {
		return next, done, err
	}
	res.Created += n
	return r.To + 1, done, nil
}

// enableAtHead is the part of EnableFromBacklog under the round barrier,
// with the disabled subscription b locked: it makes the deliveries of the
// retained backlog from from up to the head, makes the deliveries that
// disabled it pending again (revive), skips the pending deliveries
// of events retention removed, activates the subscription at the head and
// inserts a delivery job if any delivery is pending. It fills in res.
func (p *EnableBacklogParams) enableAtHead(ctx context.Context, tx pgx.Tx, b *backlogRow, from int64, res *EnableResult) error {
	res.WasCause = b.cause
	r, err := readRetention(ctx, tx, p.Events)
	if err != nil {
		return err
	}
	if res.Reset, err = b.revive(ctx, tx, p.ID); err != nil {
		return err
	}
	if from <= r.head {
		_, n, err := pendingFrom(ctx, tx, p.Events, p.ID, b.space, sync.SeqRange{From: max(from, r.low), To: r.head}, false)
		if err != nil {
			return err
		}
		res.Created += n
	}
	ct, err := tx.Exec(ctx, skipLostSQL, p.ID, r.low)
	if err != nil {
		return fmt.Errorf("skip deliveries of removed events: %w", err)
	}
	res.Skipped = ct.RowsAffected()
	if _, err := tx.Exec(ctx, activateSQL, p.ID, r.head); err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	res.ResumeAfterSeq = r.head
	if b.lastDelivered+1 < r.low {
		res.NotDeliveredFrom, res.NotDeliveredTo = b.lastDelivered+1, r.low-1
	}
	return p.jobIfPending(ctx, tx)
}

// jobIfPending inserts a delivery job if the subscription has a pending
// delivery.
func (p *EnableBacklogParams) jobIfPending(ctx context.Context, tx pgx.Tx) error {
	var pending bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending')`,
		p.ID).Scan(&pending); err != nil {
		return err
	}
	if !pending {
		return nil
	}
	return startSender(ctx, tx, p.Jobs, p.ID, 0)
}
