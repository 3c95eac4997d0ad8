package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// deliveredSQL records the 2xx answers of subscriptions' last batches —
// their attempts ($1-$6 and $11: subscription, seq, code, seconds,
// excerpt, start, webhook-id as messageID gives it), their deliveries
// finished — and moves each subscription $7 in the same statement: its
// highest delivered seq (at least $12, the highest the recorder recorded
// of its last batch), its failing mark cleared ($13), its lease taken
// ($14) for $10 ms by job $8 of process $9, and its throttle's next slot
// ($15, NULL: unchanged). It is the one update of a subscription row on a
// batch's usual path. The deliveries are found as in pendingAtSQL, by
// their subscriptions and the range of their seqs; without that bound, a
// plan made while a few deliveries were pending reads every pending
// delivery of every subscription. One range serves a group: a group
// records only batches that took everything their subscription had
// pending (groupable), so in that range each subscription has its batch
// and what came since.
var deliveredSQL = `
WITH o AS (
    SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::int[], $4::float8[], $5::text[], $6::timestamptz[], $11::text[])
        AS o(sub, seq, code, secs, excerpt, started, msg)
), a AS (
    INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds, response_excerpt, message_id)
    SELECT sub, seq, started, NULLIF(code, 0), secs, NULLIF(excerpt, ''), NULLIF(msg, '') FROM o
), d AS (
    UPDATE webhook_deliveries w SET status = 'delivered', attempts = w.attempts + 1,
        first_attempt_at = coalesce(w.first_attempt_at, o.started), finished_at = now(), last_error = NULL, next_attempt_at = NULL
    FROM o WHERE w.subscription_id = o.sub AND w.event_seq = o.seq AND w.status = 'pending'
      AND w.subscription_id = ANY($1::uuid[]) AND w.event_seq BETWEEN (SELECT min(seq) FROM o) AND (SELECT max(seq) FROM o)
    RETURNING w.subscription_id, w.event_seq
), m AS (
    SELECT subscription_id, max(event_seq) AS seq FROM d GROUP BY subscription_id
)
UPDATE webhook_subscriptions s SET
    last_delivered_seq = greatest(s.last_delivered_seq, coalesce(m.seq, 0), l.recorded),
    failing_since = CASE WHEN l.clear THEN NULL ELSE s.failing_since END,
    ` + lease.SetIfSQL("l.lease", "l.job", "l.owner", "$10") + `,
    throttle_next_at = coalesce(l.throttled, s.throttle_next_at)
FROM unnest($7::uuid[], $8::bigint[], $9::text[], $12::bigint[], $13::bool[], $14::bool[], $15::timestamptz[])
    AS l(sub, job, owner, recorded, clear, lease, throttled)
LEFT JOIN m ON m.subscription_id = l.sub
WHERE s.id = l.sub`

// queueDelivered queues on b the record of the 2xx answers of the steps'
// last batches (those the recorder has not), with their leases, in one
// statement; a step whose subscription another live sender holds records
// its answers without the lease, and one with nothing to record or take
// is left out.
func queueDelivered(b *pgx.Batch, taken []*stepTx) {
	var o outcomes
	var subs []uuid.UUID
	var jobs, recorded []int64
	var owners []string
	var clear, lease []bool
	var throttled []*time.Time
	for _, t := range taken {
		kind := decide(&t.st).kind
		if kind != outRecord && kind != outTakenOver {
			continue
		}
		n := len(o.seqs)
		t.answers(&o)
		to := recordedTo(t.last)
		if kind == outTakenOver && len(o.seqs) == n && to == 0 {
			continue
		}
		var slot *time.Time
		if t.last != nil {
			slot = t.last.throttled
		}
		subs, jobs, owners = append(subs, t.s.subID), append(jobs, t.s.me.jobID), append(owners, t.s.me.owner)
		recorded, clear = append(recorded, to), append(clear, t.clears())
		lease, throttled = append(lease, kind == outRecord), append(throttled, slot)
	}
	if len(subs) == 0 {
		return
	}
	b.Queue(deliveredSQL, o.subs, o.seqs, o.codes, o.secs, o.excerpts, o.started,
		subs, jobs, owners, taken[0].leaseFor.Milliseconds(), o.msgs, recorded, clear, lease, throttled)
}

// answers adds t's last batch's 2xx answers to o, counts them in t's
// results, and notes the first delivered event that is not operational
// and whether a probe was answered.
func (t *stepTx) answers(o *outcomes) {
	if t.last == nil {
		return
	}
	for _, r := range t.last.requests {
		if !r.sent || r.Kind != outbound.Delivered {
			continue
		}
		t.probed = t.probed || r.probe
		for _, d := range r.items {
			if t.firstPlain == nil && !webhooks.IsOperational(d.ev.Type) {
				t.firstPlain = d
			}
			t.results = append(t.results, "delivered")
		}
		o.addRequest(t.s.subID, r)
	}
}

// clears says whether recording the last batch clears the subscription's
// failing mark: an event that is not operational was delivered.
func (t *stepTx) clears() bool { return t.sub.failing && t.firstPlain != nil }

// rare says whether the step has more to record than deliveredSQL does:
// a failure, a probe answered, or a failing mark cleared. Any of them may
// change what the step claims next.
func (t *stepTx) rare() bool {
	if t.clears() || t.probed {
		return true
	}
	return t.last != nil && t.recordsFailures() && !t.last.allDelivered()
}

// recordsFailures says whether the step records its last batch's
// failures: not when the subscription was deleted, nor when another live
// sender holds it (that sender took its claims over).
func (t *stepTx) recordsFailures() bool { return t.st.found && !(!t.st.mine && t.st.leaseLive) }

// recordRest records, after deliveredSQL, what else the last batch
// brought: the recovered notice of a failing mark cleared, a probe's
// recovery, and each failure (unless another live sender holds the
// subscription: its claims were taken over). A failure may disable the
// subscription or start probing it, so the step reads its status again
// after one.
func (t *stepTx) recordRest(ctx context.Context) error {
	if t.clears() {
		t.sub.failing = false
		if err := webhooks.InsertNotice(ctx, t.tx, webhooks.TypeRecovered, t.sub.space, t.s.subID, "", "", t.firstPlain.seq); err != nil {
			return err
		}
	}
	if t.probed {
		if _, err := t.tx.Exec(ctx, probeRecoveredSQL, t.s.subID); err != nil {
			return fmt.Errorf("deliver %s: recover: %w", t.s.subID, err)
		}
		t.sub.status, t.sub.probing = webhooks.StatusActive, false
		t.s.d.cfg.Logger.InfoContext(ctx, "webhook subscription recovered: a probe was answered with 2xx",
			slog.String("subscription", t.s.subID.String()))
	}
	if t.last == nil || !t.recordsFailures() {
		t.st.active = t.sub.active()
		return nil
	}
	failed := false
	for _, r := range t.last.requests {
		if !r.sent || r.Kind == outbound.Delivered {
			continue
		}
		failed = true
		res, err := t.recordFailure(ctx, r)
		if err != nil {
			return err
		}
		for range r.items {
			t.results = append(t.results, res)
		}
	}
	if failed {
		err := t.tx.QueryRow(ctx, `SELECT status, probing FROM webhook_subscriptions WHERE id = $1`, t.s.subID).Scan(&t.sub.status, &t.sub.probing)
		if err != nil {
			return fmt.Errorf("deliver %s: reread status: %w", t.s.subID, err)
		}
	}
	t.st.active = t.sub.active()
	return nil
}

// outcomes are 2xx answers of subscriptions' batches, as deliveredSQL
// (and recordedSQL) take them.
type outcomes struct {
	subs     []uuid.UUID
	seqs     []int64
	codes    []int32
	secs     []float64
	excerpts []string
	started  []time.Time
	msgs     []string
}

// addRequest adds the deliveries of r, answered 2xx, of subscription sub,
// unless the recorder recorded them.
func (o *outcomes) addRequest(sub uuid.UUID, r *request) {
	if r.rec == recDone {
		return
	}
	for _, d := range r.items {
		o.subs, o.seqs, o.codes = append(o.subs, sub), append(o.seqs, d.seq), append(o.codes, int32(r.StatusCode))
		o.secs, o.excerpts, o.started = append(o.secs, r.Duration.Seconds()), append(o.excerpts, r.Excerpt), append(o.started, r.started)
		o.msgs = append(o.msgs, messageID(r))
	}
}

// recordedTo is the highest seq of last that the recorder recorded (0:
// none).
func recordedTo(last *batch) int64 {
	if last == nil {
		return 0
	}
	var to int64
	for _, r := range last.requests {
		if r.rec == recDone {
			to = max(to, r.items[len(r.items)-1].seq)
		}
	}
	return to
}

// pendingAtSQL finds, for a statement that updates them (as w), the
// pending deliveries of subscription $1 at seqs $2: each seq joined to its
// delivery, with event_seq bounded by the lowest and highest of them, so
// that every plan reads that range of webhook_deliveries_pending and no
// more (TestPlans_ReadTheBatchNotTheBacklog). While webhook_deliveries has
// no statistics (autovacuum off, or not yet run) the planner takes a
// subscription's pending deliveries for a handful, and a read of all of
// them for as cheap as the range: given "event_seq = ANY($2)" alone, it
// reads the subscription's whole backlog for every batch. Bounded and
// joined on event_seq, the range's order on event_seq decides.
const pendingAtSQL = `FROM unnest($2::bigint[]) AS k(seq)
    WHERE w.subscription_id = $1 AND w.event_seq = k.seq AND w.status = 'pending'
      AND w.event_seq BETWEEN (SELECT min(s) FROM unnest($2::bigint[]) s) AND (SELECT max(s) FROM unnest($2::bigint[]) s)`

// failedSQL records a failed request carrying deliveries $2, signed under
// webhook-id $8 (empty for the event's own; see messageID): an attempt of
// each, counted, and returns the first one's count, first attempt and the
// time now.
const failedSQL = `
WITH a AS (
    INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds, error, response_excerpt, message_id)
    SELECT $1, seq, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), NULLIF($8, '') FROM unnest($2::bigint[]) AS seq
), d AS (
    UPDATE webhook_deliveries w SET attempts = w.attempts + 1, last_error = $6, first_attempt_at = coalesce(w.first_attempt_at, $3)
    ` + pendingAtSQL + `
    RETURNING w.event_seq, w.attempts, w.first_attempt_at
)
SELECT attempts, first_attempt_at, now() FROM d WHERE event_seq = ($2::bigint[])[1]`

const nextAttemptSQL = `UPDATE webhook_deliveries SET next_attempt_at = $3 WHERE subscription_id = $1 AND event_seq = $2`

// probeRecoveredSQL makes a probed subscription active again.
const probeRecoveredSQL = `
UPDATE webhook_subscriptions
SET status = 'active', disabled_cause = NULL, disabled_detail = NULL, disabled_at = NULL, probing = false, updated_at = now()
WHERE id = $1 AND probing`

// probeSQL disables a subscription as failing and starts probing it.
const probeSQL = `
UPDATE webhook_subscriptions
SET status = 'disabled', disabled_cause = 'failing', disabled_detail = $2, disabled_at = now(), probing = true, updated_at = now()
WHERE id = $1 AND status = 'active'`

// deadSQL makes the pending deliveries $2 dead with the error $3.
const deadSQL = `
UPDATE webhook_deliveries w SET status = 'dead', finished_at = now(), last_error = $3, next_attempt_at = NULL
    ` + pendingAtSQL

// failure is a failed request as its policy judges it: the head delivery
// (the first of the request), every seq the request carried, and the
// attempt's error.
type failure struct {
	r    *request
	seqs []int64
}

// recordFailure counts a failed request and decides what follows: a 410
// disables the subscription; otherwise the head's next attempt is a probe's
// (it waits for the next probe), its policy's once its budget is spent, or
// its backoff. Only the head is scheduled: an ordered sender waits for it,
// and the other deliveries of a failed batch request stay pending behind
// it. It returns the metric result.
func (t *stepTx) recordFailure(ctx context.Context, r *request) (string, error) {
	f := &failure{r: r, seqs: make([]int64, len(r.items))}
	for i, d := range r.items {
		f.seqs[i] = d.seq
	}
	var code *int
	if r.StatusCode != 0 {
		code = &r.StatusCode
	}
	var attempts int
	var first *time.Time
	var now time.Time
	err := t.tx.QueryRow(ctx, failedSQL, t.s.subID, f.seqs, r.started, code, r.Duration.Seconds(), r.Err, r.Excerpt, messageID(r)).
		Scan(&attempts, &first, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return "retry", nil // no longer pending: skipped or resent meanwhile
	}
	if err != nil {
		return "", fmt.Errorf("deliver %s: record failure of %v: %w", t.s.subID, f.seqs, err)
	}
	if r.Kind == outbound.Gone {
		return "gone", t.gone(ctx, f)
	}
	if !r.probe && !webhooks.IsOperational(r.head().ev.Type) {
		if err := webhooks.NoteFailed(ctx, t.tx, t.s.subID, r.Err, r.head().seq); err != nil {
			return "", err
		}
	}
	return t.schedule(ctx, f, attempts, first, now)
}

// gone disables the subscription whose receiver answered 410: its
// deliveries in the request are dead.
func (t *stepTx) gone(ctx context.Context, f *failure) error {
	msg := fmt.Sprintf("receiver answered %d Gone", f.r.StatusCode)
	if _, err := t.tx.Exec(ctx, deadSQL, t.s.subID, f.seqs, msg); err != nil {
		return fmt.Errorf("deliver %s: dead after 410: %w", t.s.subID, err)
	}
	return t.disable(ctx, webhooks.CauseGone, msg, f.seqs[0], webhooks.TypeDisabled)
}

// disable disables the subscription with cause and appends the operational
// event typ once, if it was active.
func (t *stepTx) disable(ctx context.Context, cause, msg string, seq int64, typ string) error {
	ct, err := t.tx.Exec(ctx, webhooks.DisableSQL, t.s.subID, cause, msg)
	if err != nil {
		return fmt.Errorf("deliver %s: disable (%s): %w", t.s.subID, cause, err)
	}
	return webhooks.NoteChange(ctx, t.tx, ct, typ, t.s.subID, cause, msg, seq)
}

// schedule decides the failed head's next attempt: a probe waits for the
// next probe, a delivery past its budget is judged by the policy, any
// other waits its backoff.
func (t *stepTx) schedule(ctx context.Context, f *failure, attempts int, first *time.Time, now time.Time) (string, error) {
	sched, r := t.s.d.schedule(&t.sub.pol), f.r
	var wait time.Duration
	switch {
	case r.probe:
		var probes int
		if err := t.tx.QueryRow(ctx, `
SELECT count(*) FROM webhook_attempts a JOIN webhook_subscriptions s ON s.id = a.subscription_id
WHERE a.subscription_id = $1 AND a.event_seq = $2 AND a.attempted_at >= s.disabled_at`, t.s.subID, f.seqs[0]).Scan(&probes); err != nil {
			return "", fmt.Errorf("deliver %s: count probes: %w", t.s.subID, err)
		}
		wait = probeWait(sched, max(probes-1, 1), r.RetryAfter)
	case first != nil && now.Sub(*first) >= sched.budget:
		return t.budgetSpent(ctx, f, sched, attempts, now)
	default:
		wait = backoff(sched, attempts, r.RetryAfter)
		if first != nil {
			// Never wait past the budget's end by more than needed to notice it.
			wait = min(wait, max(first.Add(sched.budget).Sub(now), time.Millisecond))
		}
	}
	if _, err := t.tx.Exec(ctx, nextAttemptSQL, t.s.subID, f.seqs[0], now.Add(wait)); err != nil {
		return "", fmt.Errorf("deliver %s: schedule %d: %w", t.s.subID, f.seqs[0], err)
	}
	return "retry", nil
}

// budgetSpent ends a delivery whose retry budget is spent, as its policy
// says: dead and go on (ordered_dead_letter, unordered); or the
// subscription is disabled as failing, and either the delivery is dead or,
// with auto_recover, it stays pending as the probe.
func (t *stepTx) budgetSpent(ctx context.Context, f *failure, sched schedule, attempts int, now time.Time) (string, error) {
	head, pol := f.seqs[0], &t.sub.pol
	msg := fmt.Sprintf("retry budget %s exhausted after %d attempts; last: %s", sched.budget, attempts, f.r.Err)
	log := t.s.d.cfg.Logger.With(slog.String("subscription", t.s.subID.String()), slog.Int64("seq", head), slog.Int("attempts", attempts))
	if pol.Name != webhooks.PolicyOrdered {
		if _, err := t.tx.Exec(ctx, deadSQL, t.s.subID, []int64{head}, msg); err != nil {
			return "", fmt.Errorf("deliver %s: dead %d: %w", t.s.subID, head, err)
		}
		log.InfoContext(ctx, "webhook delivery dead: retry budget spent", slog.String("policy", pol.Name))
		return "dead", nil
	}
	if pol.AutoRecover {
		wait := probeWait(sched, 0, f.r.RetryAfter)
		ct, err := t.tx.Exec(ctx, probeSQL, t.s.subID, msg+"; probing with this delivery (auto_recover)")
		if err != nil {
			return "", fmt.Errorf("deliver %s: disable and probe: %w", t.s.subID, err)
		}
		if err := webhooks.NoteChange(ctx, t.tx, ct, webhooks.TypeDisabled, t.s.subID, webhooks.CauseFailing, msg, head); err != nil {
			return "", err
		}
		if _, err := t.tx.Exec(ctx, nextAttemptSQL, t.s.subID, head, now.Add(wait)); err != nil {
			return "", fmt.Errorf("deliver %s: schedule probe %d: %w", t.s.subID, head, err)
		}
		log.WarnContext(ctx, "webhook subscription disabled: failing; probing (auto_recover)", slog.Duration("next_probe", wait))
		return "retry", nil
	}
	if _, err := t.tx.Exec(ctx, deadSQL, t.s.subID, []int64{head}, msg); err != nil {
		return "", fmt.Errorf("deliver %s: dead %d: %w", t.s.subID, head, err)
	}
	if err := t.disable(ctx, webhooks.CauseFailing, msg, head, webhooks.TypeDisabled); err != nil {
		return "", err
	}
	log.WarnContext(ctx, "webhook subscription disabled: failing")
	return "dead", nil
}

// messageID is what an attempt of r records as its webhook-id
// (webhook_attempts.message_id): "" for a request of one event signed
// under that event's id, which the attempt's delivery already names, and
// the id otherwise: a batch's.
func messageID(r *request) string {
	if len(r.items) == 1 && r.msg.ID == r.head().eventID.String() {
		return ""
	}
	return r.msg.ID
}
