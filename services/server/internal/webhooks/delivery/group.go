package delivery

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/coalesce"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// steps runs the steps of a process's senders that come at the same time
// in one transaction, with one statement for each kind of work (lock,
// record, claim) over all of them. A round wakes every sender it gave new
// deliveries at once, so in a trickle the senders of a process step
// together, each with a batch of one or two deliveries; alone, each step
// would be a transaction of its own.
//
// A step joins the next group that starts (of at most maxGroup steps):
// while one group's transaction runs, the steps that arrive wait for the
// one after it. Only the usual path is taken in a group: an active,
// ordered subscription that is not throttled, probed or marked failing,
// whose row no other transaction holds, and whose last batch (if any) was
// answered 2xx throughout. Any other step, and every step of a group whose
// transaction failed before its commit, runs alone (stepTx) after the
// group, so that each policy keeps one implementation.
type steps struct {
	d      *Deliverer
	groups *coalesce.Batcher[*groupStep]
}

func newSteps(d *Deliverer) *steps {
	g := &steps{d: d}
	g.groups = coalesce.New(g.runGroup, coalesce.Options[*groupStep]{MaxWeight: maxGroup})
	return g
}

// groupStep is one sender's step in a group, and its outcome.
type groupStep struct {
	s    *sender
	last *batch
	// alone: the group did not take the step; the sender runs it alone.
	alone bool
	p     plan
	// err: the group's commit failed, so whether it took effect is not
	// known; the sender fails as a step alone would.
	err error

	t     *stepTx
	items []*delivery
	want  int
}

// groupable says whether a step that records last may run in a group:
// last (if any) drained its subscription, so the sender is in a trickle,
// not working through a backlog, where its batches are full and a step of
// its own costs little per delivery; every request of last was sent and
// answered 2xx, none was a probe and no throttle slot is to be recorded.
func groupable(last *batch) bool {
	if last == nil {
		return true
	}
	if !last.drained || last.throttled != nil || !last.allDelivered() {
		return false
	}
	for _, r := range last.requests {
		if r.probe {
			return false
		}
	}
	return true
}

// step runs s's step in the next group; false if the sender must run it
// alone.
func (g *steps) step(s *sender, last *batch) (plan, bool, error) {
	gs := &groupStep{s: s, last: last}
	// With a context that never ends, Do returns once the group has run.
	_ = g.groups.Do(context.Background(), gs)
	return gs.p, !gs.alone, gs.err
}

// maxGroup is the most steps one group takes: a group's transaction holds
// the rows of all its subscriptions, and builds every batch it claims.
const maxGroup = 32

// runGroup runs one group's transaction and counts its results once it
// committed. If it failed before its commit, every step of it runs alone;
// if the commit failed, the outcome is unknown and every step taken fails
// with the error, as a step alone would (its batch is not recorded twice).
func (g *steps) runGroup(group []*groupStep) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	taken, committing, err := g.tx(ctx, group)
	switch {
	case err != nil && committing:
		for _, gs := range taken {
			gs.p, gs.err = plan{}, fmt.Errorf("deliver %s: commit: %w", gs.s.subID, err)
		}
		return
	case err != nil:
		g.d.cfg.Logger.WarnContext(ctx, "webhook senders: a group step failed; its steps run alone",
			slog.Int("steps", len(group)), slog.Any("error", err))
		for _, gs := range group {
			gs.alone, gs.p = true, plan{}
		}
		return
	}
	if len(taken) > 0 {
		g.d.metrics.step()
	}
	for _, gs := range taken {
		for _, r := range gs.t.results {
			g.d.metrics.delivery(r)
		}
	}
}

// tx is one group's transaction: lock every subscription, set aside the
// steps that must run alone, record the others' last batches and take
// their leases, claim their next deliveries, decide the rights and read
// the events for all of them, and build each sender's plan.
func (g *steps) tx(ctx context.Context, group []*groupStep) (taken []*groupStep, committing bool, err error) {
	tx, err := g.d.pool.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer func() {
		if err != nil && !committing {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if taken, err = g.lock(ctx, tx, group); err != nil {
		return nil, false, err
	}
	if len(taken) > 0 {
		if err := g.recordAndClaim(ctx, tx, taken); err != nil {
			return nil, false, err
		}
		if err := g.prepare(ctx, taken); err != nil {
			return nil, false, err
		}
	}
	return taken, true, tx.Commit(ctx)
}

// lockSubsSQL is lockSubSQL for the subscriptions $1 of jobs $2 of
// processes $3. Rows another transaction holds are skipped: their steps
// run alone, so a subscription that an owner's change or a recover holds
// delays its own sender only, not the group, and a group never waits in a
// cycle with another transaction that locks several subscriptions.
var lockSubsSQL = `SELECT p.n, ` + subColumns("p.job_id", "p.process", "$4") + `
FROM unnest($1::uuid[], $2::bigint[], $3::text[]) WITH ORDINALITY AS p(sub_id, job_id, process, n)
JOIN webhook_subscriptions s ON s.id = p.sub_id
FOR NO KEY UPDATE OF s SKIP LOCKED`

// lock locks the group's subscriptions and returns the steps the group
// takes; the others are marked to run alone: those whose subscription is
// not on the usual path, appears twice in the group, or was not locked
// (held by another transaction, or deleted, which the step alone finds).
func (g *steps) lock(ctx context.Context, tx pgx.Tx, group []*groupStep) ([]*groupStep, error) {
	ids, jobs, owners := make([]uuid.UUID, len(group)), make([]int64, len(group)), make([]string, len(group))
	seen := make(map[uuid.UUID]int, len(group))
	for i, gs := range group {
		ids[i], jobs[i], owners[i] = gs.s.subID, gs.s.me.jobID, gs.s.me.owner
		seen[gs.s.subID]++
		gs.t = &stepTx{s: gs.s, tx: tx, leaseFor: g.d.cfg.lease()}
		gs.alone = true // unless its row is locked
	}
	rows, err := tx.Query(ctx, lockSubsSQL, ids, jobs, owners, g.d.cfg.LivenessSettle.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("lock subscriptions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int
		var sub subRow
		if err := sub.scan(rows, &n); err != nil {
			return nil, fmt.Errorf("lock subscriptions: %w", err)
		}
		gs := group[n-1]
		gs.t.sub = sub
		gs.s.alone = !sub.groupable()
		gs.alone = seen[gs.s.subID] > 1 || gs.s.alone
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock subscriptions: %w", err)
	}
	var taken []*groupStep
	for _, gs := range group {
		if !gs.alone {
			taken = append(taken, gs)
		}
	}
	return taken, nil
}

// groupable says whether a step of the subscription may run in a group:
// its lease is this sender's or free, it is active, ordered, not probed,
// not throttled and not marked failing.
func (s *subRow) groupable() bool {
	return (s.mine || !s.leaseLive) && s.status == webhooks.StatusActive && !s.probing && !s.failing &&
		s.pol.Name != webhooks.PolicyUnordered && s.pol.MaxRequestsPerSecond <= 0
}

// deliveredManySQL is deliveredSQL for many subscriptions: the 2xx answers
// $1-$6 and $11 (subscription, seq, code, seconds, excerpt, start,
// webhook-id as messageID gives it), and the lease of subscriptions $7
// taken by jobs $8 of processes $9 for $10 ms, each moved at least to $12,
// the highest seq the recorder recorded of its last batch. Its
// deliveries are found as in pendingAtSQL, by their subscriptions and the
// range of their seqs; without that bound, a plan made while a few
// deliveries were pending reads every pending delivery of every
// subscription. One range serves the whole group: a group records only
// batches that took everything their subscription had pending (groupable),
// so in that range each subscription has its batch and what came since.
var deliveredManySQL = `
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
    ` + lease.SetSQL("l.job", "l.owner", "$10") + `
FROM unnest($7::uuid[], $8::bigint[], $9::text[], $12::bigint[]) AS l(sub, job, owner, recorded)
LEFT JOIN m ON m.subscription_id = l.sub
WHERE s.id = l.sub`

// claimManySQL is claimOrderedSQL for subscriptions $1, each its $2.
const claimManySQL = `
SELECT l.n, d.event_seq, d.event_id, d.attempts, d.first_attempt_at, d.next_attempt_at, d.resent_at
FROM unnest($1::uuid[], $2::int[]) WITH ORDINALITY AS l(sub, want, n)
CROSS JOIN LATERAL (
    SELECT event_seq, event_id, attempts, first_attempt_at, next_attempt_at, resent_at FROM webhook_deliveries
    WHERE subscription_id = l.sub AND status = 'pending' ORDER BY event_seq LIMIT l.want
) d`

// recordAndClaim records the taken steps' last batches with their leases
// in one statement, then claims their next deliveries in another.
func (g *steps) recordAndClaim(ctx context.Context, tx pgx.Tx, taken []*groupStep) error {
	var o outcomes
	subs, jobs, owners, wants := make([]uuid.UUID, len(taken)), make([]int64, len(taken)), make([]string, len(taken)), make([]int32, len(taken))
	recorded := make([]int64, len(taken))
	for i, gs := range taken {
		subs[i], jobs[i], owners[i] = gs.s.subID, gs.s.me.jobID, gs.s.me.owner
		gs.want = gs.t.want()
		wants[i] = int32(gs.want)
		o.add(gs.t, gs.last)
		recorded[i] = recordedTo(gs.last)
	}
	b := &pgx.Batch{}
	b.Queue(deliveredManySQL, o.subs, o.seqs, o.codes, o.secs, o.excerpts, o.started,
		subs, jobs, owners, g.d.cfg.lease().Milliseconds(), o.msgs, recorded)
	b.Queue(claimManySQL, subs, wants).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var n int
			d := &delivery{}
			if err := rows.Scan(&n, &d.seq, &d.eventID, &d.attempts, &d.firstAttempt, &d.nextAt, &d.resentAt); err != nil {
				return err
			}
			taken[n-1].items = append(taken[n-1].items, d)
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record %d delivered and claim: %w", len(o.seqs), err)
	}
	for _, gs := range taken {
		slices.SortFunc(gs.items, func(a, b *delivery) int { return cmp.Compare(a.seq, b.seq) })
	}
	return nil
}

// outcomes are the 2xx answers of many subscriptions' last batches, as
// deliveredManySQL (and recordedSQL) take them.
type outcomes struct {
	subs     []uuid.UUID
	seqs     []int64
	codes    []int32
	secs     []float64
	excerpts []string
	started  []time.Time
	msgs     []string
}

// add adds last's answers (all 2xx, see groupable) for t's subscription
// and counts them in t's results.
func (o *outcomes) add(t *stepTx, last *batch) {
	if last == nil {
		return
	}
	for _, r := range last.requests {
		if r.Kind != outbound.Delivered {
			continue
		}
		for range r.items {
			t.results = append(t.results, "delivered")
		}
		o.addRequest(t.s.subID, r)
	}
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

// prepare decides each taken step's plan: the claimed items that are to
// be sent get one rights decision per distinct owner, token and space and
// their events read in one statement, all in one round trip.
func (g *steps) prepare(ctx context.Context, taken []*groupStep) error {
	var sending []*groupStep
	for _, gs := range taken {
		p, decided, err := gs.t.unsendable(ctx, gs.items)
		if err != nil {
			return err
		}
		if decided {
			gs.p = p
			continue
		}
		sending = append(sending, gs)
	}
	if len(sending) == 0 {
		return nil
	}
	decidedAt := time.Now()
	allowed, evs, err := g.decideAndRead(ctx, sending)
	if err != nil {
		return err
	}
	var sent []*groupStep
	for i, gs := range sending {
		if !allowed[i].Allowed {
			gs.p = plan{}
			if err := gs.t.refuse(ctx, gs.items, "not allowed: "+allowed[i].Reason); err != nil {
				return err
			}
			continue
		}
		sent = append(sent, gs)
	}
	attachEvents(sent, evs)
	for _, gs := range sent {
		if gs.p, err = gs.t.build(ctx, gs.items, decidedAt, len(gs.items) < gs.want); err != nil {
			return err
		}
	}
	return nil
}

// decideAndRead decides the rights of the steps in sending (in their
// order) and reads the events of all their claimed deliveries, in one
// round trip.
func (g *steps) decideAndRead(ctx context.Context, sending []*groupStep) ([]authz.Decision, []sync.Event, error) {
	b := &pgx.Batch{}
	decisions, err := queueRights(b, sending)
	if err != nil {
		return nil, nil, err
	}
	var seqs []int64
	for _, gs := range sending {
		for _, d := range gs.items {
			seqs = append(seqs, d.seq)
		}
	}
	var evs []sync.Event
	g.d.events.QueueEventsAt(b, seqs, &evs)
	if err := sending[0].t.tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, fmt.Errorf("rights and events: %w", err)
	}
	out, err := decisions()
	return out, evs, err
}

// queueRights queues on b one statement that reads the rights of every
// distinct owner, token and space of the steps in sending; once b has run,
// decisions returns their decisions in sending's order.
func queueRights(b *pgx.Batch, sending []*groupStep) (decisions func() ([]authz.Decision, error), err error) {
	type key struct {
		principal, space string
		token            uuid.UUID
	}
	index := map[key]int{}
	var distinct []authz.Request
	reqs := make([]int, len(sending))
	for i, gs := range sending {
		r := gs.t.sub.rights()
		k := key{principal: r.Principal, space: r.Space}
		if r.Token != nil {
			k.token = *r.Token
		}
		n, ok := index[k]
		if !ok {
			n = len(distinct)
			index[k] = n
			distinct = append(distinct, r)
		}
		reqs[i] = n
	}
	pending, err := authz.QueueMany(b, distinct)
	if err != nil {
		return nil, err
	}
	return func() ([]authz.Decision, error) {
		out := make([]authz.Decision, len(sending))
		for i, n := range reqs {
			dec, err := pending[n].Decision()
			if err != nil {
				return nil, err
			}
			out[i] = dec
		}
		return out, nil
	}, nil
}

// attachEvents gives every claimed delivery of sent its event from evs;
// one retention removed has none.
func attachEvents(sent []*groupStep, evs []sync.Event) {
	bySeq := eventsBySeq(evs)
	for _, gs := range sent {
		for _, d := range gs.items {
			d.ev = bySeq[d.seq]
		}
	}
}

// eventsBySeq indexes evs by seq.
func eventsBySeq(evs []sync.Event) map[int64]*sync.Event {
	bySeq := make(map[int64]*sync.Event, len(evs))
	for i := range evs {
		bySeq[evs[i].Seq] = &evs[i]
	}
	return bySeq
}
