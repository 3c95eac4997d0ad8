package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/coalesce"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/lease"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
)

// A step records a sender's last batch and claims its next one, in one
// short transaction. Steps of several senders that come at the same time
// share that transaction (a group), with one statement for each kind of
// work (lock, record, claim, rights and events) over all of them; a step
// that comes alone is a group of one, on the same path and with the same
// statements. A round wakes every sender it gave new deliveries at once,
// so in a trickle the senders of a process step together, each with a
// batch of one or two deliveries.
//
// A step joins the next group that starts (of at most maxGroup steps)
// when it is a trickle's (groupable): while one group's transaction runs,
// the steps that arrive wait for the one after it. Any other step runs at
// once as a group of one. In a group, a subscription whose row another
// transaction holds is skipped, and so is the second step of one
// subscription; those steps, and every step of a group whose transaction
// failed before its commit, run again as groups of one, which wait for
// their row.
type steps struct {
	d      *Deliverer
	groups *coalesce.Batcher[*stepTx]
}

func newSteps(d *Deliverer) *steps {
	g := &steps{d: d}
	g.groups = coalesce.New(g.runGroup, coalesce.Options[*stepTx]{MaxWeight: maxGroup})
	return g
}

// maxGroup is the most steps one group takes: a group's transaction holds
// the rows of all its subscriptions, and builds every batch it claims.
const maxGroup = 32

// stepTx is one sender's step in a transaction, what it has found so far,
// and its plan.
type stepTx struct {
	s    *sender
	last *batch
	tx   pgx.Tx
	sub  subRow
	st   stepState
	p    plan
	// results are the metric results counted once the transaction
	// committed.
	results []string
	// leaseFor is how long from now the lease runs after this step.
	leaseFor time.Duration
	// want is how many deliveries the claim asked for; decidedAt is when
	// the rights of what it claimed were decided.
	want      int
	decidedAt time.Time
	// firstPlain is the last batch's first delivered event that is not
	// operational; probed: a probe of it was answered 2xx.
	firstPlain *delivery
	probed     bool
	// again: the group did not take the step (its row was held or
	// skipped, or the group failed before its commit); it runs again as a
	// group of one.
	again bool
	// err: the commit failed, so whether it took effect is not known.
	err error
}

func newStepTx(s *sender, last *batch) *stepTx {
	return &stepTx{s: s, last: last, leaseFor: s.d.cfg.lease()}
}

// step settles the last batch with the recorder, then runs the step: in
// the next group when it is a trickle's and the sender may share, else
// (and when the group did not take it) as a group of one. Its metric
// results are counted once its transaction committed.
func (s *sender) step(ctx context.Context, last *batch) (plan, error) {
	s.d.rec.settle(last)
	select {
	case <-s.wake:
	default:
	}
	if ctx.Err() == nil && !s.alone && (last != nil || s.idled) && groupable(last) {
		t := newStepTx(s, last)
		// With a context that never ends, Do returns once the group has run.
		_ = s.d.steps.groups.Do(context.Background(), t)
		if !t.again {
			return t.p, t.err
		}
	}
	return s.d.steps.alone(ctx, newStepTx(s, last))
}

// groupable says whether a step that records last may wait for a group:
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

// alone runs t as a group of one, which waits for its subscription's row.
func (g *steps) alone(ctx context.Context, t *stepTx) (plan, error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	taken, committing, err := g.tx(ctx, []*stepTx{t}, true)
	if err != nil {
		if committing {
			err = fmt.Errorf("deliver %s: commit: %w", t.s.subID, err)
		}
		return plan{}, err
	}
	g.count(taken)
	return t.p, nil
}

// runGroup runs one group's transaction. If it failed before its commit,
// every step of it runs again alone; if the commit failed, the outcome is
// unknown and every step taken fails with the error, as a step alone would
// (its batch is not recorded twice).
func (g *steps) runGroup(group []*stepTx) {
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	taken, committing, err := g.tx(ctx, group, false)
	switch {
	case err != nil && committing:
		for _, t := range taken {
			t.p, t.err = plan{}, fmt.Errorf("deliver %s: commit: %w", t.s.subID, err)
		}
	case err != nil:
		g.d.cfg.Logger.WarnContext(ctx, "webhook senders: a group step failed; its steps run alone",
			slog.Int("steps", len(group)), slog.Any("error", err))
		for _, t := range group {
			t.again = true
		}
	default:
		g.count(taken)
	}
}

// count counts a committed transaction's step and its results.
func (g *steps) count(taken []*stepTx) {
	if len(taken) == 0 {
		return
	}
	g.d.metrics.step()
	for _, t := range taken {
		for _, r := range t.results {
			g.d.metrics.delivery(r)
		}
	}
}

// tx is one transaction of steps: lock every subscription (waiting for
// the rows with wait, skipping held ones without), then take each step
// through its decisions, with one statement per kind of work for all.
func (g *steps) tx(ctx context.Context, group []*stepTx, wait bool) (taken []*stepTx, committing bool, err error) {
	tx, err := g.d.pool.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("%s: begin: %w", name(group), err)
	}
	defer func() {
		if err != nil && !committing {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if taken, err = g.lock(ctx, tx, group, wait); err != nil {
		return nil, false, fmt.Errorf("%s: %w", name(group), err)
	}
	if err := g.work(ctx, taken); err != nil {
		return nil, false, err
	}
	return taken, true, tx.Commit(ctx)
}

// name names a transaction's steps in its errors.
func name(group []*stepTx) string {
	if len(group) == 1 {
		return "deliver " + group[0].s.subID.String()
	}
	return fmt.Sprintf("deliver (%d senders)", len(group))
}

// work takes the steps through their decisions (decide): record the last
// batches, then claim the next ones, then decide the rights and read the
// events of what is to be sent, and build each sender's plan. When no
// step has a failure, a probe or a failing mark to record, recording
// cannot change what the steps claim, and the claim goes in the same
// round trip as the record.
func (g *steps) work(ctx context.Context, taken []*stepTx) error {
	if len(taken) == 0 {
		return nil
	}
	tx, b, what := taken[0].tx, &pgx.Batch{}, name(taken)
	queueDelivered(b, taken)
	plain := true
	for _, t := range taken {
		t.st.recorded = true
		plain = plain && !t.rare()
	}
	if !plain {
		if err := sendQueued(ctx, tx, b, what+": record delivered"); err != nil {
			return err
		}
		for _, t := range taken {
			if err := t.recordRest(ctx); err != nil {
				return err
			}
		}
		b = &pgx.Batch{}
	}
	var claiming []*stepTx
	decided := map[*stepTx]outcome{}
	for _, t := range taken {
		if o := decide(&t.st); o.kind == outClaim {
			claiming = append(claiming, t)
		} else {
			decided[t] = o
		}
	}
	if err := g.claim(ctx, tx, b, what, claiming); err != nil {
		return err
	}
	for _, t := range taken {
		if o, ok := decided[t]; ok {
			if err := t.carryOut(ctx, o); err != nil {
				return err
			}
		}
	}
	return g.prepare(ctx, claiming)
}

// sendQueued sends b, if it has anything queued.
func sendQueued(ctx context.Context, tx pgx.Tx, b *pgx.Batch, what string) error {
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

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

// lockSubsSQL locks subscriptions $1 and reads what their requests need,
// each for job $2 of process $3 (the steps' order is the column n), and
// says whether each one's lease is live: unexpired, naming a job (a lease
// without one was reserved for whichever delivery job runs first, see
// reserve), and either this job's, of this process, of a process outside
// liveness, or of a process whose lock is held. Only an unexpired lease of
// another process pays for the liveness check ($4: the settle time). A
// group adds SKIP LOCKED: a subscription that an owner's change or a
// recover holds delays its own sender only, not the group, and a group
// never waits in a cycle with another transaction that locks several
// subscriptions; a group of one waits for its row.
var lockSubsSQL = `SELECT p.n, ` + subColumns("p.job_id", "p.process", "$4") + `
FROM unnest($1::uuid[], $2::bigint[], $3::text[]) WITH ORDINALITY AS p(sub_id, job_id, process, n)
JOIN webhook_subscriptions s ON s.id = p.sub_id
FOR NO KEY UPDATE OF s`

// subColumns is what lockSubsSQL reads of subscription s for the job
// named by the SQL expression job of the process owner, with the liveness
// settle time settle.
func subColumns(job, owner, settle string) string {
	return `owner, space, url, secret, CASE WHEN previous_secret_until > now() THEN coalesce(previous_secret, '') ELSE '' END,
       headers, destination_kind, destination, token_id, status, probing, failing_since IS NOT NULL,
       ` + lease.MineSQL(job) + `,
       ` + lease.LiveForSenderSQL(job, owner, settle) + `,
       now(), throttle_next_at, keeper_wake_at, ` + webhooks.PolicyColumns + `, coalesce(transform, '')`
}

// lock locks the steps' subscriptions and returns the steps the
// transaction takes. A step of a deleted subscription is taken (it
// stops). Without wait, the second step of a subscription and the steps
// whose row was not locked (held by another transaction, or deleted,
// which the step alone finds) are marked to run again alone.
func (g *steps) lock(ctx context.Context, tx pgx.Tx, group []*stepTx, wait bool) ([]*stepTx, error) {
	ids, jobs, owners := make([]uuid.UUID, len(group)), make([]int64, len(group)), make([]string, len(group))
	seen := make(map[uuid.UUID]int, len(group))
	for i, t := range group {
		ids[i], jobs[i], owners[i] = t.s.subID, t.s.me.jobID, t.s.me.owner
		seen[t.s.subID]++
		t.tx = tx
	}
	sqlText := lockSubsSQL
	if !wait {
		sqlText += " SKIP LOCKED"
	}
	rows, err := tx.Query(ctx, sqlText, ids, jobs, owners, g.d.cfg.LivenessSettle.Milliseconds())
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
		t := group[n-1]
		t.sub, t.st = sub, sub.state(t.s)
		t.s.alone = !sub.groupable()
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lock subscriptions: %w", err)
	}
	var taken []*stepTx
	for _, t := range group {
		t.again = !wait && (!t.st.found || seen[t.s.subID] > 1)
		if !t.again {
			taken = append(taken, t)
		}
	}
	return taken, nil
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

// state is what the step of sender s knows once it locked the
// subscription.
func (s *subRow) state(snd *sender) stepState {
	st := stepState{found: true, mine: s.mine, leaseLive: s.leaseLive, active: s.active(),
		unordered: s.pol.Name == webhooks.PolicyUnordered, now: s.now, sliceLeft: snd.sliceLeft()}
	if s.pol.MaxRequestsPerSecond > 0 && s.throttleNext != nil {
		st.throttleWait = max(s.throttleNext.Sub(s.now), 0)
	}
	return st
}

// groupable says whether the subscription's next step may wait for a
// group: its lease is this sender's or free, it is active, ordered, not
// probed, not throttled and not marked failing, so that its steps are a
// trickle's usual path.
func (s *subRow) groupable() bool {
	return (s.mine || !s.leaseLive) && s.status == webhooks.StatusActive && !s.probing && !s.failing &&
		s.pol.Name != webhooks.PolicyUnordered && s.pol.MaxRequestsPerSecond <= 0
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
	return plan{kind: planWait, wait: max(w, time.Millisecond)}, t.setLease(ctx, &d)
}

// stepState is what a step knows when it decides: what the lock read,
// whether the last batch was recorded (and what that left of the
// subscription's status), what the claim found, and the rights and events
// of the claimed deliveries.
type stepState struct {
	// found: the subscription exists; mine: its lease is this job's;
	// leaseLive: some sender's lease is live.
	found, mine, leaseLive bool
	recorded               bool
	// active: sent to (active, or probed), after the record.
	active    bool
	unordered bool
	// throttleWait is how long the next request must wait for the
	// throttle.
	throttleWait time.Duration
	// now is the database's time at the lock; sliceLeft what is left of
	// the sender's slice (taken at the lock, and again once the claim
	// came back).
	now       time.Time
	sliceLeft time.Duration
	// claimed: items are the claimed deliveries, in the order to send.
	claimed bool
	items   []*delivery
	// dueRead: due is when the next pending delivery of an unordered
	// subscription falls due (nil: none pending).
	dueRead bool
	due     *time.Time
	// read: the rights were decided (allowed, or denied for that reason)
	// and the items' events read (an event removed by retention is nil).
	read    bool
	allowed bool
	denied  string
}

// outcome is what a step does next, decided from what it knows.
type outcome struct {
	kind outcomeKind
	// wait: how long outHold keeps the lease before the next step, and
	// how soon an outIdle subscription's next retry falls due (0: none);
	// wakeable: a wake-up ends an outHold early.
	wait     time.Duration
	wakeable bool
	// n: outSend sends the first n items; outGap is at item n.
	n int
}

// outcomeKind is the closed set of a step's decisions.
type outcomeKind int8

const (
	// outGone: the subscription was deleted (its deliveries with it); stop.
	outGone outcomeKind = iota
	// outTakenOver: another live sender holds the subscription; what this
	// one sent is recorded, without the lease, and it stops.
	outTakenOver
	// outRecord: record the last batch and keep the lease.
	outRecord
	// outRelease: the subscription is no longer sent to (disabled); give
	// up the lease and stop.
	outRelease
	// outHold: keep the lease through a wait (the throttle, an ordered
	// head's retry, an unordered retry due within the slice).
	outHold
	// outClaim: claim the next deliveries.
	outClaim
	// outFindDue: an unordered subscription has nothing due; read when
	// its next pending delivery is.
	outFindDue
	// outIdle: nothing to send now.
	outIdle
	// outYield: deliveries wait but the slice is used up.
	outYield
	// outRead: decide the owner's rights and read the claimed events.
	outRead
	// outRefuse: the owner may not receive the events; the claimed
	// deliveries are dead without a request.
	outRefuse
	// outGap: an event left the log (retention) before its delivery; the
	// subscription is disabled with cause gap.
	outGap
	// outSend: send the first n claimed deliveries.
	outSend
)

func (k outcomeKind) String() string {
	return [...]string{"gone", "taken over", "record", "release", "hold", "claim", "find due", "idle", "yield", "read",
		"refuse", "gap", "send"}[k]
}

// decide is what the last batch's record and the claimed rows mean for
// the step, as far as st goes: each call says the next thing to do, and
// the step calls it again once that is done (outRecord, outClaim,
// outFindDue, outRead) until the outcome ends the step.
func decide(st *stepState) outcome {
	switch {
	case !st.found:
		return outcome{kind: outGone}
	case !st.mine && st.leaseLive:
		return outcome{kind: outTakenOver}
	case !st.recorded:
		return outcome{kind: outRecord}
	case !st.active:
		return outcome{kind: outRelease}
	case st.throttleWait > 0:
		return outcome{kind: outHold, wait: st.throttleWait}
	case !st.claimed:
		return outcome{kind: outClaim}
	case len(st.items) == 0 && st.unordered:
		return untilDue(st)
	case len(st.items) == 0:
		return outcome{kind: outIdle}
	case st.items[0].nextAt != nil && st.items[0].nextAt.After(st.now):
		return outcome{kind: outHold, wait: st.items[0].nextAt.Sub(st.now)} // the ordered head waits for its retry
	case st.sliceLeft <= 0:
		return outcome{kind: outYield}
	case !st.read:
		return outcome{kind: outRead}
	case !st.allowed:
		return outcome{kind: outRefuse}
	}
	for i, d := range st.items {
		if d.ev == nil {
			if i == 0 || st.unordered {
				return outcome{kind: outGap, n: i}
			}
			return outcome{kind: outSend, n: i} // sent first; the gap is the next batch's head
		}
	}
	return outcome{kind: outSend, n: len(st.items)}
}

// untilDue is the outcome of an unordered step with nothing due: wait,
// with the lease and open to wake-ups, for a retry due within the slice;
// otherwise idle (its release makes it the keeper of later retries), with
// a linger that ends when the retry falls due: a linger is bounded by the
// job's run, not the slice, and would otherwise sleep past it.
func untilDue(st *stepState) outcome {
	switch {
	case !st.dueRead:
		return outcome{kind: outFindDue}
	case st.due == nil:
		return outcome{kind: outIdle}
	}
	w := st.due.Sub(st.now)
	if w >= st.sliceLeft {
		return outcome{kind: outIdle, wait: max(w, time.Millisecond)}
	}
	return outcome{kind: outHold, wait: w, wakeable: true}
}
