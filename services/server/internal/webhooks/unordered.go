package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// The unordered policy sends up to max_in_flight deliveries of a
// subscription at once. One job at a time is the subscription's pump, as
// for the ordered policies (pump_job_id, pump_until, pump_owner, taken over
// when the pump's process is gone); other jobs of the subscription end at
// once. The pump runs max_in_flight sender goroutines, which alone bounds
// the requests in flight (TestUnordered_RespectsMaxInFlight), and feeds
// them from a queue it keeps claimed ahead of them (prefetch), so a
// sender that gets its answer starts the next request at once, whatever
// the database's latency. Each transaction of the pump records the
// outcomes that have arrived and claims due deliveries for the room in its
// queue; no transaction is open during a request.
//
// Each delivery also has a claim of its own (claim_job_id, claim_owner,
// claim_until), live until claim_until unless its process's liveness lock
// is free, so a delivery has one sender at a time even when a pump takes
// over from one that still runs, and each outcome is recorded once: a 2xx
// only moves a pending delivery, and a failure only ends its claim if that
// is still the recording job's (TestUnordered_CompetingJobsSendEachDeliveryOnce).
// A delivery is sent twice only when its sender dies (or its process is
// judged dead) between the receiver's 2xx and the record.
//
// A failed delivery is retried on its own schedule; the pump that ends
// with retries not yet due becomes the subscription's keeper
// (keeper_wake_at) and snoozes without holding the pump claim, so new
// deliveries are sent at once by the jobs the rounds add.

// claimableSQL is true for a pending delivery that nobody sends now: it
// has no claim, the claim expired, or the claim's process has ended its
// session ($2: this process's owner, $3: LivenessSettle in ms).
var claimableSQL = `CASE WHEN claim_until IS NULL OR claim_until <= now() THEN true
     WHEN claim_owner IS NULL OR claim_owner = $2 THEN false
     ELSE ` + liveness.GoneSQL("claim_owner", "$3") + ` END`

// busySQL says, without locking anything, whether the subscription is an
// active unordered one whose pump is another live job ($4 is this one).
var busySQL = `
SELECT coalesce(policy = 'unordered' AND status = 'active' AND pump_until > now() AND pump_job_id <> $4
       AND (pump_owner IS NULL OR pump_owner = $2 OR NOT ` + liveness.GoneSQL("pump_owner", "$3") + `), false)
FROM webhook_subscriptions WHERE id = $1`

// dueSQL finds the next $4 due deliveries nobody sends, oldest due first (a
// retry by its next attempt, a new one by its creation), through
// webhook_deliveries_due, and locks them.
var dueSQL = `
SELECT event_seq, event_id, next_attempt_at FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' AND coalesce(next_attempt_at, created_at) <= now() AND ` + claimableSQL + `
ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT $4 FOR UPDATE`

// dueNowSQL says whether an active unordered subscription has a delivery
// due now that nobody sends.
var dueNowSQL = `
SELECT EXISTS (
    SELECT 1 FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
    WHERE d.subscription_id = $1 AND s.status = 'active' AND s.policy = 'unordered' AND d.status = 'pending'
      AND coalesce(d.next_attempt_at, d.created_at) <= now() AND ` + claimableSQL + `)`

// prefetch is how many rounds of max_in_flight requests the pump keeps
// claimed, counting those in flight and those whose outcome is not yet
// recorded: enough that a transaction slowed by a busy database does not
// leave the senders idle.
const prefetch = 3

// maxClaimsPerStep bounds the deliveries one transaction claims.
const maxClaimsPerStep = 64

// nextDueSQL is when the keeper must come back: the earliest due time of a
// delivery nobody sends, or the end of a live claim whose sender might not
// record it.
var nextDueSQL = `
SELECT least(
    (SELECT coalesce(next_attempt_at, created_at) FROM webhook_deliveries
     WHERE subscription_id = $1 AND status = 'pending' AND ` + claimableSQL + `
     ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT 1),
    (SELECT min(claim_until) FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending' AND claim_until > now()))`

// claimDeliverySQL makes $3 (of process $4) the sender of deliveries $2
// until $5, starts their budgets, moves the throttle ($6, if set) and
// returns the custom headers.
const claimDeliverySQL = `
WITH c AS (
    UPDATE webhook_deliveries SET claim_job_id = $3, claim_owner = NULLIF($4::text, ''), claim_until = $5,
        first_attempt_at = coalesce(first_attempt_at, now())
    WHERE subscription_id = $1 AND event_seq = ANY($2::bigint[])
), th AS (
    UPDATE webhook_subscriptions SET throttle_next_at = $6 WHERE id = $1 AND $6::timestamptz IS NOT NULL
)
SELECT headers FROM webhook_subscriptions WHERE id = $1`

// releaseClaimsSQL gives back claims of job $3 that were never sent.
const releaseClaimsSQL = `
UPDATE webhook_deliveries SET claim_job_id = NULL, claim_owner = NULL, claim_until = NULL
WHERE subscription_id = $1 AND event_seq = ANY($2::bigint[]) AND claim_job_id = $3`

// keeperSQL sets when the subscription's keeper wakes.
const keeperSQL = `UPDATE webhook_subscriptions SET keeper_wake_at = $2 WHERE id = $1`

// pumpStep is what one transaction of the pump hands over and may take.
type pumpStep struct {
	// finished are the sends whose outcome arrived; unsent are the seqs of
	// claims taken back from the queue without a request.
	finished []*outcome
	unsent   []int64
	// held is how many claims stay unrecorded after this step; senders is
	// how many sender goroutines run (0 before the first step).
	held, senders int
	claiming      bool
}

// workUnordered runs the job as the pump of an unordered subscription
// while its slice lasts, then waits for its sends, records them and
// decides whether it comes back (keepUnordered). Its senders end when it
// returns.
func (d *Deliverer) workUnordered(ctx context.Context, me sender, subID uuid.UUID, start time.Time) error {
	queue := make(chan *claim, prefetch*MaxMaxInFlight+maxClaimsPerStep)
	var wg gosync.WaitGroup
	defer wg.Wait()
	defer close(queue)
	if err := d.pumpUnordered(ctx, me, subID, start, queue, &wg); err != nil {
		return err
	}
	return d.finishUnordered(ctx, me, subID)
}

// pumpUnordered runs the pump's steps (unorderedStep) until every claim it
// took is recorded and it claims no more: the slice is over, the pump was
// halted, or nothing is due. It feeds the sends to the senders through
// queue; they start, in wg, at the first step that knows max_in_flight.
func (d *Deliverer) pumpUnordered(ctx context.Context, me sender, subID uuid.UUID, start time.Time, queue chan *claim, wg *gosync.WaitGroup) error {
	done := make(chan *outcome, cap(queue))
	p := pumpStep{}
	outstanding := 0 // claimed and not yet recorded
	stopped, halted := false, false
	for {
		// Once the slice is over the queue is sent, at full concurrency,
		// and nothing more is claimed.
		p.claiming = !stopped && time.Since(start) < d.cfg.Slice
		stopped = stopped || !p.claiming
		p.held = outstanding - len(p.finished) - len(p.unsent)
		n, err := d.inTx(ctx, me, subID, func(t *stepTx) (next, error) { return t.unorderedStep(ctx, &p) })
		if err != nil {
			takeBack(queue) // not sent; the claims run out and the outcomes in flight are lost
			return err
		}
		outstanding = p.held + len(n.sends)
		p.finished, p.unsent = nil, nil
		if p.senders == 0 && n.maxInFlight > 0 {
			p.senders = n.maxInFlight
			d.startSenders(ctx, p.senders, queue, done, wg)
		}
		for _, c := range n.sends {
			queue <- c
		}
		if n.stop && !halted {
			// Disabled, deleted, no longer unordered, or another pump:
			// what no sender has taken is given back unsent.
			halted, stopped = true, true
			p.unsent = takeBack(queue)
			continue
		}
		if n.more {
			continue
		}
		if outstanding == 0 {
			if !stopped && n.pause > 0 && d.pauseWithin(ctx, start, n.pause) {
				continue
			}
			return nil
		}
		p.finished = collect(done, n.pause)
	}
}

// startSenders starts, in wg, n sender goroutines that send the claims of
// queue until it is closed and hand each outcome to done.
func (d *Deliverer) startSenders(ctx context.Context, n int, queue <-chan *claim, done chan<- *outcome, wg *gosync.WaitGroup) {
	for range n {
		wg.Go(func() {
			for c := range queue {
				done <- d.send(ctx, c)
			}
		})
	}
}

// finishUnordered decides, once the pump's sends are recorded, whether
// the job comes back (keepUnordered), and looks once more for a delivery
// due now after the pump claim is released.
func (d *Deliverer) finishUnordered(ctx context.Context, me sender, subID uuid.UUID) error {
	n, err := d.inTx(ctx, me, subID, func(t *stepTx) (next, error) { return t.keepUnordered(ctx) })
	if err != nil {
		return err
	}
	if n.snooze != nil {
		return river.JobSnooze(*n.snooze)
	}
	// The pump claim is released: a job a round added meanwhile may have
	// ended seeing this pump still live, so look once more.
	if due, err := d.dueNow(ctx, me, subID); err != nil || due {
		zero := time.Duration(0)
		return cmpErr(err, river.JobSnooze(zero))
	}
	return nil
}

// collect waits for a send to end (or for the throttle's pause, if any)
// and returns that outcome with every other one that is ready, for one
// step to record.
func collect(done <-chan *outcome, pause time.Duration) []*outcome {
	var throttle <-chan time.Time
	if pause > 0 {
		throttle = time.After(pause)
	}
	var out []*outcome
	select {
	case o := <-done:
		out = append(out, o)
	case <-throttle:
	}
	for {
		select {
		case o := <-done:
			out = append(out, o)
		default:
			return out
		}
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// takeBack empties the queue of claims no sender has taken and returns
// their seqs.
func takeBack(queue chan *claim) []int64 {
	var seqs []int64
	for {
		select {
		case c := <-queue:
			seqs = append(seqs, c.seq)
		default:
			return seqs
		}
	}
}

// busyElsewhere says whether another live job is the pump of the
// unordered subscription. The rounds add a job for every batch of a busy
// subscription; such a job ends at once, without queueing for the
// subscription's row lock behind the pump: the pump looks for due
// deliveries after every outcome, and once more after it released its
// claim.
func (d *Deliverer) busyElsewhere(ctx context.Context, me sender, subID uuid.UUID) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var busy bool
	err := d.pool.QueryRow(ctx, busySQL, subID, me.owner, d.cfg.LivenessSettle.Milliseconds(), me.jobID).Scan(&busy)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("deliver %s: busy: %w", subID, err)
	}
	return busy, nil
}

// dueNow says whether an active unordered subscription has a delivery due
// now that nobody sends.
func (d *Deliverer) dueNow(ctx context.Context, me sender, subID uuid.UUID) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	var due bool
	err := d.pool.QueryRow(ctx, dueNowSQL, subID, me.owner, d.cfg.LivenessSettle.Milliseconds()).Scan(&due)
	if err != nil {
		return false, fmt.Errorf("deliver %s: due now: %w", subID, err)
	}
	return due, nil
}

// recordAll records outcomes of the subscription's sends: every 2xx in one
// statement, the rest one by one. It says whether one may have disabled
// the subscription.
func (t *stepTx) recordAll(ctx context.Context, outcomes []*outcome) (changed bool, err error) {
	var delivered []*outcome
	for _, o := range outcomes {
		if o.kind == resultDelivered {
			delivered = append(delivered, o)
			continue
		}
		r, _, err := t.d.record(ctx, t.tx, o)
		if err != nil {
			return false, err
		}
		t.results = append(t.results, r)
		changed = changed || r == "gone"
	}
	if err := recordDelivered(ctx, t.tx, t.subID, delivered); err != nil {
		return false, err
	}
	for range delivered {
		t.results = append(t.results, "delivered")
	}
	return changed, nil
}

// unorderedStep is one transaction of the pump: it records the outcomes
// that arrived and gives back claims taken back unsent; it stops unless the
// subscription is an active unordered one whose pump is this job or none;
// it renews the pump claim and, if claiming, claims due deliveries for the
// room in the queue (max_in_flight ahead of the senders; one at a time
// under a throttle, which spaces them). It returns a pause for the
// throttle, and more when it may claim again at once.
func (t *stepTx) unorderedStep(ctx context.Context, p *pumpStep) (next, error) {
	s, _, err := t.lockAndRecord(ctx, nil)
	if err != nil || s == nil { // deleted: its deliveries went with it
		return next{stop: true}, err
	}
	changed, err := t.recordAll(ctx, p.finished)
	if err != nil {
		return next{}, err
	}
	if len(p.unsent) > 0 {
		if _, err := t.tx.Exec(ctx, releaseClaimsSQL, t.subID, p.unsent, t.me.jobID); err != nil {
			return next{}, fmt.Errorf("deliver %s: release claims: %w", t.subID, err)
		}
	}
	if changed || s.status != StatusActive || s.pol.Name != PolicyUnordered || (!s.mine && s.pumpJobID != nil && s.pumpLive) {
		return next{stop: true}, nil
	}
	if _, err := t.hold(ctx, 0, s.now.Add(t.d.cfg.Timeout+leaseMargin)); err != nil {
		return next{}, err
	}
	n := next{maxInFlight: s.pol.MaxInFlight}
	slots := s.pol.MaxInFlight
	if p.senders > 0 {
		slots = p.senders
	}
	room := prefetch*slots - p.held
	if !p.claiming || room <= 0 {
		return n, nil
	}
	if w := s.throttleWait(); w > 0 {
		n.pause = w
		return n, nil
	}
	return t.claimDue(ctx, s, room, n)
}

// claimDue claims due deliveries for room claims in the queue (at most
// maxClaimsPerStep; one under a throttle) and returns n with their sends,
// the throttle's pause after them, and more when it may claim again at
// once. It stops the pump at a delivery whose event left the log.
func (t *stepTx) claimDue(ctx context.Context, s *subRow, room int, n next) (next, error) {
	want := min(room, maxClaimsPerStep)
	if s.pol.MaxRequestsPerSecond > 0 {
		want = 1
	}
	due, evs, err := t.dueDeliveries(ctx, want)
	if err != nil {
		return next{}, err
	}
	var sendable []head
	for i := range due {
		v, err := t.judgeEvent(ctx, s, &due[i], evs[due[i].seq])
		switch {
		case err != nil:
			return next{}, err
		case v == verdictGap:
			return next{stop: true}, nil
		case v == verdictSend:
			sendable = append(sendable, due[i])
		}
	}
	if n.sends, err = t.claimDeliveries(ctx, s, sendable, evs); err != nil {
		return next{}, err
	}
	if r := s.pol.MaxRequestsPerSecond; r > 0 && len(n.sends) > 0 {
		n.pause = time.Duration(float64(time.Second) / r) // the throttle's next slot
	}
	n.more = len(due) == want && room > want && s.pol.MaxRequestsPerSecond <= 0
	return n, nil
}

// dueDeliveries locks up to want due deliveries nobody sends and reads
// their events.
func (t *stepTx) dueDeliveries(ctx context.Context, want int) ([]head, map[int64]*sync.Event, error) {
	rows, err := t.tx.Query(ctx, dueSQL, t.subID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds(), want)
	if err != nil {
		return nil, nil, fmt.Errorf("deliver %s: find due deliveries: %w", t.subID, err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (head, error) {
		var h head
		err := r.Scan(&h.seq, &h.eventID, &h.nextAt)
		return h, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("deliver %s: find due deliveries: %w", t.subID, err)
	}
	evs, err := t.d.eventsAt(ctx, t.tx, due)
	if err != nil {
		return nil, nil, fmt.Errorf("deliver %s: read events: %w", t.subID, err)
	}
	return due, evs, nil
}

// eventsAt reads the events of deliveries hs through the port: one read of
// their whole seq range when they are dense in it (a busy subscription's
// backlog), else one read per delivery. A seq that retention removed has no
// entry.
func (d *Deliverer) eventsAt(ctx context.Context, tx pgx.Tx, hs []head) (map[int64]*sync.Event, error) {
	out := make(map[int64]*sync.Event, len(hs))
	if len(hs) == 0 {
		return out, nil
	}
	lo, hi := hs[0].seq, hs[0].seq
	for _, h := range hs {
		lo, hi = min(lo, h.seq), max(hi, h.seq)
	}
	if span := hi - lo + 1; span <= int64(4*len(hs)) {
		evs, err := d.events.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: lo - 1, Limit: int(span)})
		if err != nil {
			return nil, err
		}
		want := make(map[int64]bool, len(hs))
		for _, h := range hs {
			want[h.seq] = true
		}
		for i := range evs {
			if want[evs[i].Seq] {
				out[evs[i].Seq] = &evs[i]
			}
		}
		return out, nil
	}
	for _, h := range hs {
		ev, err := d.eventAt(ctx, tx, h.seq)
		if err != nil {
			return nil, err
		}
		if ev != nil {
			out[h.seq] = ev
		}
	}
	return out, nil
}

// claimDeliveries makes the job the sender of the deliveries hs (with
// their events in evs) and returns the sends.
func (t *stepTx) claimDeliveries(ctx context.Context, s *subRow, hs []head, evs map[int64]*sync.Event) ([]*claim, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	seqs := make([]int64, len(hs))
	for i := range hs {
		seqs[i] = hs[i].seq
	}
	var headers map[string]string
	// A claim waits in the queue for at most prefetch-1 rounds of
	// requests before its own.
	until := s.now.Add(prefetch*t.d.cfg.Timeout + leaseMargin)
	if err := t.tx.QueryRow(ctx, claimDeliverySQL, t.subID, seqs, t.me.jobID, t.me.owner, until, s.throttleAfter()).Scan(&headers); err != nil {
		return nil, fmt.Errorf("deliver %s: claim %v: %w", t.subID, seqs, err)
	}
	job, sched := t.me.jobID, t.d.schedule(&s.pol)
	out := make([]*claim, 0, len(hs))
	for _, h := range hs {
		ev := evs[h.seq]
		body, err := json.Marshal(ev.Envelope())
		if err != nil {
			return nil, fmt.Errorf("deliver %s: envelope %d: %w", t.subID, h.seq, err)
		}
		out = append(out, &claim{subID: t.subID, seq: h.seq, eventID: h.eventID, operational: isOperational(ev.Type),
			url: s.url, secret: s.secret, previousSecret: s.prevSecret, headers: headers, body: body,
			pol: s.pol, sched: sched, claimJob: &job, traceParent: ev.TraceParent})
	}
	return out, nil
}

// keepUnordered decides, once the pump's sends are recorded, whether the
// job comes back. It releases the pump claim. With deliveries due now (the
// slice ended) it comes back at once; with only retries not yet due it
// becomes the keeper and snoozes until the first is due (or the throttle
// allows it), unless a keeper already wakes by then. A subscription whose
// policy changed is handed to the ordered sender at once.
func (t *stepTx) keepUnordered(ctx context.Context) (next, error) {
	s, _, err := t.lockAndRecord(ctx, nil)
	if err != nil || s == nil {
		return next{}, err
	}
	if s.mine {
		if err := t.release(ctx); err != nil {
			return next{}, err
		}
	} else if s.pumpJobID != nil && s.pumpLive {
		return next{}, nil // another job is the pump; it decides when it ends
	}
	zero := time.Duration(0)
	if s.pol.Name != PolicyUnordered {
		return next{snooze: &zero}, nil
	}
	if s.status != StatusActive {
		return next{}, nil
	}
	var wake *time.Time
	if err := t.tx.QueryRow(ctx, nextDueSQL, t.subID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds()).Scan(&wake); err != nil {
		return next{}, fmt.Errorf("deliver %s: next due: %w", t.subID, err)
	}
	if wake == nil {
		return next{}, nil
	}
	at := later(*wake, s.now.Add(s.throttleWait()))
	if !at.After(s.now) {
		return next{snooze: &zero}, nil
	}
	if s.keeperWake != nil && s.keeperWake.After(s.now) && !s.keeperWake.After(at) {
		return next{}, nil // the keeper comes back in time
	}
	if _, err := t.tx.Exec(ctx, keeperSQL, t.subID, at); err != nil {
		return next{}, fmt.Errorf("deliver %s: keeper: %w", t.subID, err)
	}
	wait := at.Sub(s.now)
	return next{snooze: &wait}, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
