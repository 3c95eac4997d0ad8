package delivery

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// claimSQL claims the next deliveries of subscriptions $1, at most $2 of
// each (the steps' order is the column n): for an ordered one ($3 false)
// its lowest pending seqs, for an unordered one its pending deliveries
// that are due, oldest due first (a retry by its next attempt, a new one
// by its creation), with that time as due. The branch a subscription's
// policy does not take is not run (a one-time filter on the parameter).
const claimSQL = `
SELECT l.n, d.event_seq, d.event_id, d.attempts, d.first_attempt_at, d.next_attempt_at, d.resent_at, d.due
FROM unnest($1::uuid[], $2::int[], $3::bool[]) WITH ORDINALITY AS l(sub, want, unordered, n)
CROSS JOIN LATERAL (
    (SELECT event_seq, event_id, attempts, first_attempt_at, next_attempt_at, resent_at, NULL::timestamptz AS due FROM webhook_deliveries
     WHERE NOT l.unordered AND subscription_id = l.sub AND status = 'pending' ORDER BY event_seq LIMIT l.want)
    UNION ALL
    (SELECT event_seq, event_id, attempts, first_attempt_at, next_attempt_at, resent_at, coalesce(next_attempt_at, created_at) FROM webhook_deliveries
     WHERE l.unordered AND subscription_id = l.sub AND status = 'pending' AND coalesce(next_attempt_at, created_at) <= now()
     ORDER BY coalesce(next_attempt_at, created_at), event_seq LIMIT l.want)
) d`

// claimed is a claimed delivery and, for an unordered subscription, when
// it fell due.
type claimed struct {
	d   *delivery
	due *time.Time
}

// claim queues on b the claim of the next deliveries of the steps in
// claiming, in one statement, and sends b (with what was queued before
// it: the record, when nothing could change the claim); each step gets
// its deliveries in the order to send them.
func (g *steps) claim(ctx context.Context, tx pgx.Tx, b *pgx.Batch, what string, claiming []*stepTx) error {
	if len(claiming) == 0 {
		return sendQueued(ctx, tx, b, what+": record delivered")
	}
	subs, wants, unordered := make([]uuid.UUID, len(claiming)), make([]int32, len(claiming)), make([]bool, len(claiming))
	found := make([][]claimed, len(claiming))
	for i, t := range claiming {
		t.want = t.wantN()
		subs[i], wants[i], unordered[i] = t.s.subID, int32(t.want), t.st.unordered
	}
	b.Queue(claimSQL, subs, wants, unordered).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var n int
			c := claimed{d: &delivery{}}
			if err := rows.Scan(&n, &c.d.seq, &c.d.eventID, &c.d.attempts, &c.d.firstAttempt, &c.d.nextAt, &c.d.resentAt, &c.due); err != nil {
				return err
			}
			found[n-1] = append(found[n-1], c)
		}
		return rows.Err()
	})
	if err := sendQueued(ctx, tx, b, what+": claim"); err != nil {
		return err
	}
	for i, t := range claiming {
		slices.SortFunc(found[i], byDue)
		t.st.sliceLeft = t.s.sliceLeft() // what the claimed rows mean is decided now
		t.st.claimed, t.st.items = true, make([]*delivery, len(found[i]))
		for j, c := range found[i] {
			t.st.items[j] = c.d
		}
	}
	return nil
}

// byDue orders claimed deliveries oldest due first (unordered), then by
// seq.
func byDue(a, b claimed) int {
	if a.due != nil && b.due != nil {
		if c := a.due.Compare(*b.due); c != 0 {
			return c
		}
	}
	return cmp.Compare(a.d.seq, b.d.seq)
}

// wantN is how many deliveries the step claims.
func (t *stepTx) wantN() int {
	if t.sub.status != webhooks.StatusActive || t.s.sliceLeft() <= 0 {
		return 1 // a probe is the head alone; past the slice, only look
	}
	return max(t.s.d.cfg.BatchSize, t.sub.pol.MaxBatch)
}

// prepare takes the claiming steps to their plans: what their claims
// mean (decide), with, for the steps that send, one rights decision per
// distinct owner, token and space and their events read in one statement,
// all in one round trip.
func (g *steps) prepare(ctx context.Context, claiming []*stepTx) error {
	var reading []*stepTx
	for _, t := range claiming {
		o := decide(&t.st)
		if o.kind == outFindDue {
			if err := t.findDue(ctx); err != nil {
				return err
			}
			o = decide(&t.st)
		}
		if o.kind == outRead {
			reading = append(reading, t)
			continue
		}
		if err := t.carryOut(ctx, o); err != nil {
			return err
		}
	}
	if len(reading) == 0 {
		return nil
	}
	if err := g.read(ctx, reading); err != nil {
		return err
	}
	for _, t := range reading {
		if err := t.carryOut(ctx, decide(&t.st)); err != nil {
			return err
		}
	}
	return nil
}

// carryOut carries out a decision that ends the step's plan.
func (t *stepTx) carryOut(ctx context.Context, o outcome) error {
	var err error
	switch o.kind {
	case outGone, outTakenOver:
		t.p = plan{kind: planStop}
	case outRelease:
		t.p, err = plan{kind: planStop}, t.setLease(ctx, nil)
	case outHold:
		t.p, err = t.hold(ctx, o.wait)
		t.p.wakeable = o.wakeable
	case outIdle:
		t.p = plan{kind: planIdle, retryIn: o.wait}
	case outYield:
		t.p = plan{kind: planYield}
	case outRefuse:
		t.p, err = plan{kind: planAgain}, t.refuse(ctx, t.st.items, "not allowed: "+t.st.denied)
	case outGap:
		t.p, err = plan{kind: planStop}, t.gap(ctx, t.st.items[o.n].seq)
	case outSend:
		t.p, err = t.build(t.st.items[:o.n], t.decidedAt, o.n == len(t.st.items) && len(t.st.items) < t.want)
	default:
		err = fmt.Errorf("deliver %s: step cannot carry out %v here", t.s.subID, o.kind)
	}
	return err
}

// refuseSQL makes deliveries $2 dead without a request, each with an
// attempt that says why ($3) and, as no request was signed, an empty
// webhook-id.
const refuseSQL = `
WITH a AS (
    INSERT INTO webhook_attempts (subscription_id, event_seq, status_code, duration_seconds, error, message_id)
    SELECT $1, seq, NULL, 0, $3, '' FROM unnest($2::bigint[]) AS seq
)
UPDATE webhook_deliveries w SET status = 'dead', finished_at = now(), last_error = $3, next_attempt_at = NULL
    ` + pendingAtSQL

// refuse makes the claimed deliveries dead without a request: rights
// apply at send time, not when the event was matched.
func (t *stepTx) refuse(ctx context.Context, items []*delivery, msg string) error {
	seqs := make([]int64, len(items))
	for i, d := range items {
		seqs[i] = d.seq
	}
	if _, err := t.tx.Exec(ctx, refuseSQL, t.s.subID, seqs, msg); err != nil {
		return fmt.Errorf("deliver %s: refuse %d deliveries: %w", t.s.subID, len(seqs), err)
	}
	for range seqs {
		t.results = append(t.results, "dead")
	}
	return nil
}

// gap disables the subscription whose delivery at seq lost its event to
// retention: order can no longer be kept, so the owner must resynchronize
// and enable it again.
func (t *stepTx) gap(ctx context.Context, seq int64) error {
	detail := fmt.Sprintf("event %d left the log (retention) before it was delivered", seq)
	if _, err := t.tx.Exec(ctx, deadSQL, t.s.subID, []int64{seq}, detail); err != nil {
		return fmt.Errorf("deliver %s: gap at %d: %w", t.s.subID, seq, err)
	}
	if err := t.disable(ctx, webhooks.CauseGap, detail, seq, webhooks.TypeGap); err != nil {
		return err
	}
	t.results = append(t.results, "gap")
	t.s.d.cfg.Logger.WarnContext(ctx, "webhook subscription disabled: gap at head",
		slog.String("subscription", t.s.subID.String()), slog.Int64("seq", seq))
	return nil
}

// findDue reads when the unordered subscription's next pending delivery
// falls due.
func (t *stepTx) findDue(ctx context.Context) error {
	if err := t.tx.QueryRow(ctx, nextDueSQL, t.s.subID).Scan(&t.st.due); err != nil {
		return fmt.Errorf("deliver %s: next due: %w", t.s.subID, err)
	}
	t.st.dueRead = true
	return nil
}

// read decides the rights of the steps in reading and reads the events
// of all their claimed deliveries, in one round trip; an event that
// retention removed is nil.
func (g *steps) read(ctx context.Context, reading []*stepTx) error {
	b := &pgx.Batch{}
	decisions, err := queueRights(b, reading)
	if err != nil {
		return err
	}
	var seqs []int64
	for _, t := range reading {
		for _, d := range t.st.items {
			seqs = append(seqs, d.seq)
		}
	}
	var evs []sync.Event
	g.d.events.QueueEventsAt(b, seqs, &evs)
	decidedAt := time.Now()
	if err := sendQueued(ctx, reading[0].tx, b, name(reading)+": rights and events"); err != nil {
		return err
	}
	decs, err := decisions()
	if err != nil {
		return err
	}
	bySeq := make(map[int64]*sync.Event, len(evs))
	for i := range evs {
		bySeq[evs[i].Seq] = &evs[i]
	}
	for i, t := range reading {
		t.decidedAt, t.st.read, t.st.allowed, t.st.denied = decidedAt, true, decs[i].Allowed, decs[i].Reason
		for _, d := range t.st.items {
			d.ev = bySeq[d.seq]
		}
	}
	return nil
}

// queueRights queues on b one statement that reads the rights of every
// distinct owner, token and space of the steps in reading; once b has run,
// decisions returns their decisions in reading's order.
func queueRights(b *pgx.Batch, reading []*stepTx) (decisions func() ([]authz.Decision, error), err error) {
	type key struct {
		principal, space string
		token            uuid.UUID
	}
	index := map[key]int{}
	var distinct []authz.Request
	reqs := make([]int, len(reading))
	for i, t := range reading {
		r := t.sub.rights()
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
		out := make([]authz.Decision, len(reading))
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

// rights is what a request of the subscription needs: its owner's right
// to receive its space's events, through its token if it has one.
func (s *subRow) rights() authz.Request {
	return authz.Request{Action: authz.ActionWebhookDeliver, Principal: s.owner, Token: s.tokenID, Space: s.space}
}

// build makes the batch of items, whose events were read and whose rights
// were decided at decidedAt; drained: the claim took every pending
// delivery there was.
func (t *stepTx) build(items []*delivery, decidedAt time.Time, drained bool) (plan, error) {
	s := &t.sub
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
	return plan{kind: planSend, batch: b}, nil
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
