package webhooks

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
)

// Queue is the River queue of delivery jobs.
const Queue = "webhooks"

// KindDeliver is the job kind of deliveries.
const KindDeliver = "webhook_out.deliver"

// DeliverArgs is a delivery job. It asks for the pending deliveries of one
// subscription to be sent, in seq order; Seq is the lowest seq the round
// that created the job added, for logs only: one job serves every pending
// delivery of its subscription, not just that seq.
type DeliverArgs struct {
	SubscriptionID uuid.UUID `json:"subscription_id"`
	Seq            int64     `json:"seq"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return KindDeliver }

// InsertOpts puts delivery jobs on their own queue. Retries of a failing
// receiver are snoozes and do not count as attempts; MaxAttempts only
// bounds database trouble.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 25}
}

// DeliverConfig configures a Deliverer.
type DeliverConfig struct {
	// AllowPrivateTargets lets connections reach loopback and private
	// addresses (webhooks.allow_private_targets). Default false.
	AllowPrivateTargets bool
	// Timeout bounds one attempt, connect to last byte read
	// (webhooks.timeout). Default 15s.
	Timeout time.Duration
	// RetryBudget is how long a delivery is retried before its
	// subscription is disabled as failing (webhooks.retry_budget). Default 72h.
	RetryBudget time.Duration
	// MaxResponseBytes is the most of a response body read
	// (webhooks.max_response_bytes). Default 64 KiB.
	MaxResponseBytes int
	// RetryBase is the first retry's wait; it doubles per attempt, with
	// jitter. Default 5s.
	RetryBase time.Duration
	// RetryMax caps one wait, also one asked for by Retry-After. Default 1h.
	RetryMax time.Duration
	// Slice is how long one job keeps sending a subscription's backlog
	// before it yields its worker slot to other subscriptions. Default 5s.
	Slice time.Duration
	// LivenessSettle is how old the session of a step must be before the
	// step may judge the process of another job's claim dead
	// (liveness.GoneSQL). Default liveness.Settle.
	LivenessSettle time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock for retry decisions. Default time.Now.
	Now func() time.Time
}

func (c *DeliverConfig) withDefaults() DeliverConfig {
	out := *c
	out.Timeout = cmp.Or(out.Timeout, 15*time.Second)
	out.RetryBudget = cmp.Or(out.RetryBudget, 72*time.Hour)
	out.MaxResponseBytes = cmp.Or(out.MaxResponseBytes, 64<<10)
	out.RetryBase = cmp.Or(out.RetryBase, 5*time.Second)
	out.RetryMax = cmp.Or(out.RetryMax, time.Hour)
	out.Slice = cmp.Or(out.Slice, 5*time.Second)
	out.LivenessSettle = cmp.Or(out.LivenessSettle, liveness.Settle)
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

func (c *DeliverConfig) validate() error {
	switch {
	case c.Timeout < 0:
		return errors.New("webhooks deliver config: Timeout must not be negative")
	case c.RetryBudget < 0:
		return errors.New("webhooks deliver config: RetryBudget must not be negative")
	case c.MaxResponseBytes < 0:
		return errors.New("webhooks deliver config: MaxResponseBytes must not be negative")
	case c.RetryBase < 0 || c.RetryMax < c.RetryBase:
		return errors.New("webhooks deliver config: RetryBase must be between 0 and RetryMax")
	case c.LivenessSettle < 0:
		return errors.New("webhooks deliver config: LivenessSettle must not be negative")
	}
	return nil
}

// excerptBytes is how much of a response body is recorded with an attempt.
const excerptBytes = 1 << 10

// dbTimeout bounds every short transaction of a delivery.
const dbTimeout = 10 * time.Second

// leaseMargin is added to a sender's claim beyond the attempt's timeout.
const leaseMargin = 30 * time.Second

// Deliverer is the River worker of webhook_out.deliver. A job becomes the
// one sender of its subscription (pump_job_id), sends the lowest pending
// delivery, records the outcome and goes on to the next one in the same
// transaction, until nothing is pending, a retry has to wait (the job
// snoozes) or its slice is used up (it snoozes for 0 and is picked up
// again). Jobs that find another live sender end at once: that sender will
// see their deliveries. No transaction is open during an HTTP request.
//
// A claim names the process that wrote it (pump_owner, its River client
// ID, when the process takes part in package liveness). A claim is live
// until pump_until, unless its owner's liveness lock is free: then the
// owner died (SIGKILL, a lost host) and the next job of the subscription
// takes over at once instead of after pump_until
// (TestDelivery_TakesOverFromADeadSender). The delivery the dead sender
// had in flight is sent again: receivers deduplicate by webhook-id.
type Deliverer struct {
	river.WorkerDefaults[DeliverArgs]
	pool    *pgxpool.Pool
	events  sync.EventSource
	client  *http.Client
	metrics *Metrics
	cfg     DeliverConfig
}

// NewDeliverer returns the delivery worker; it reads the events it sends
// from events. metrics may be nil.
func NewDeliverer(pool *pgxpool.Pool, events sync.EventSource, metrics *Metrics, cfg *DeliverConfig) (*Deliverer, error) {
	c := DeliverConfig{}
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	return &Deliverer{pool: pool, events: events, client: NewHTTPClient(c.Timeout, c.AllowPrivateTargets), metrics: metrics, cfg: c}, nil
}

// Timeout implements river.Worker: a job may use its slice plus one attempt.
func (d *Deliverer) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return d.cfg.Slice + d.cfg.Timeout + leaseMargin
}

// shortRetries is how many failed runs of a delivery job come back within
// seconds (NextRetry); later ones take River's default backoff.
const shortRetries = 10

// NextRetry implements river.Worker. A delivery job fails only on database
// trouble (a receiver's failures are snoozes), and while it waits for its
// retry the subscription's deliveries wait too. Its first shortRetries
// retries come after 1 s, doubling up to 30 s, with up to 10% jitter, so
// sending resumes within seconds of the database coming back rather than
// after River's default of 16 s, then 81 s, then 256 s; later ones take
// River's default, which spreads the 25 attempts over weeks.
func (d *Deliverer) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	if job.Attempt < 1 || job.Attempt > shortRetries {
		return time.Time{}
	}
	back := min(time.Second<<(job.Attempt-1), 30*time.Second)
	return time.Now().Add(back + rand.N(back/10+1))
}

// claim is what a send needs, read in the claiming transaction.
type claim struct {
	subID          uuid.UUID
	seq            int64
	eventID        uuid.UUID
	url            string
	secret         string
	previousSecret string
	// headers are the subscription's custom headers.
	headers map[string]string
	body    []byte
	// operational: the event is an operational event (bothy.webhook.*),
	// whose attempts do not move the subscription's failing state.
	operational bool

	// pol and sched are the subscription's policy and retry schedule.
	pol   Policy
	sched schedule
	// probe: the send probes a subscription disabled as failing.
	probe bool
	// claimJob is the job that holds the delivery's own claim (unordered
	// policy); nil when the claim is the subscription's (ordered ones).
	claimJob *int64

	// traceParent is the event's trace context (sync.Event.TraceParent),
	// which the attempt's span and the traceparent header continue.
	traceParent string
}

// result kinds of one send.
type resultKind int

const (
	resultDelivered resultKind = iota
	resultRetry
	resultGone
)

// outcome of one send, recorded in the next transaction.
type outcome struct {
	claim      *claim
	kind       resultKind
	statusCode int
	duration   time.Duration
	err        string
	excerpt    string
	retryAfter time.Duration
}

// next says what Work does after a step.
type next struct {
	send   *claim
	snooze *time.Duration
	// pause: wait this long in the process for the throttle and step
	// again, or snooze for it if the slice ends first.
	pause time.Duration
	// unordered: the subscription's policy is unordered (workUnordered).
	unordered bool
	// stop: claim no more (unordered); the subscription is disabled,
	// deleted or no longer unordered.
	stop bool
	// sends are the claims of an unordered step; more: it made progress
	// without a send (refusals), so claim again at once.
	sends []*claim
	more  bool
	// maxInFlight is the unordered subscription's, for the pump's
	// senders.
	maxInFlight int
}

// Work implements river.Worker.
func (d *Deliverer) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	start := time.Now()
	me := sender{jobID: job.ID, owner: liveness.OwnerOf(job.AttemptedBy)}
	if busy, err := d.busyElsewhere(ctx, me, job.Args.SubscriptionID); err != nil || busy {
		return err
	}
	var prev *outcome
	for {
		n, err := d.step(ctx, me, job.Args.SubscriptionID, prev, time.Since(start) < d.cfg.Slice)
		if err != nil {
			return err
		}
		if n.unordered {
			return d.workUnordered(ctx, me, job.Args.SubscriptionID, start)
		}
		if n.pause > 0 && d.pauseWithin(ctx, start, n.pause) {
			prev = nil
			continue
		}
		if n.snooze != nil {
			return river.JobSnooze(*n.snooze)
		}
		if n.send == nil {
			return nil
		}
		prev = d.send(ctx, n.send)
	}
}

// sender is who claims: the job, and the process running it ("" if that
// process takes no part in liveness).
type sender struct {
	jobID int64
	owner string
}

// subRow is the subscription as a step reads it, locked.
type subRow struct {
	owner, space, url, secret, prevSecret string
	tokenID                               *uuid.UUID
	status                                string
	pumpJobID                             *int64
	pumpLive                              bool
	now                                   time.Time
	pumpUntil                             *time.Time
	// mine: the claim is this job's.
	mine bool
	pol  Policy
	// probing: disabled as failing and probed (auto_recover).
	probing bool
	// throttleNext is when the next request may start (throttle_next_at).
	throttleNext *time.Time
	// claimsLive: a delivery has a live claim of its own, an unordered
	// send from before the policy changed.
	claimsLive bool
	// keeperWake is when the job that comes back for an unordered
	// subscription's retries wakes (keeper_wake_at).
	keeperWake *time.Time
}

// throttleWait is how long the next request must wait for the throttle.
func (s *subRow) throttleWait() time.Duration {
	if s.pol.MaxRequestsPerSecond <= 0 || s.throttleNext == nil {
		return 0
	}
	return max(s.throttleNext.Sub(s.now), 0)
}

// throttleAfter is throttle_next_at once a request starts now; nil
// without a throttle. Requests are spaced evenly, without bursts.
func (s *subRow) throttleAfter() *time.Time {
	if s.pol.MaxRequestsPerSecond <= 0 {
		return nil
	}
	from := s.now
	if s.throttleNext != nil && s.throttleNext.After(from) {
		from = *s.throttleNext
	}
	t := from.Add(time.Duration(float64(time.Second) / s.pol.MaxRequestsPerSecond))
	return &t
}

// pauseWithin waits d in the process if that ends within the job's slice;
// false if it would not, or ctx ended.
func (d *Deliverer) pauseWithin(ctx context.Context, start time.Time, w time.Duration) bool {
	if time.Since(start)+w >= d.cfg.Slice {
		return false
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// lockSubSQL locks the subscription and says whether its claim is live:
// unexpired, and either the claim of this job ($2), of this process ($3),
// of a process outside liveness, or of a process whose lock is held. Only
// an unexpired claim of another process pays for the liveness check. It
// reads the policy, and whether a delivery has a claim of its own (the
// partial index webhook_deliveries_claimed is empty for ordered ones).
var lockSubSQL = `
SELECT owner, space, url, secret, CASE WHEN previous_secret_until > now() THEN coalesce(previous_secret, '') ELSE '' END,
       token_id, status, pump_job_id,
       CASE WHEN pump_until IS NULL OR pump_until <= now() THEN false
            WHEN pump_job_id = $2 OR pump_owner IS NULL OR pump_owner = $3 THEN true
            ELSE NOT ` + liveness.GoneSQL("pump_owner", "$4") + `
       END,
       now(), pump_until, ` + policyColumns + `, probing, throttle_next_at,
       EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.subscription_id = $1 AND d.status = 'pending' AND d.claim_until > now()),
       keeper_wake_at
FROM webhook_subscriptions s WHERE id = $1 FOR NO KEY UPDATE`

// throttleSQL moves the throttle's next slot.
const throttleSQL = `UPDATE webhook_subscriptions SET throttle_next_at = $2 WHERE id = $1`

// headSQL reads the subscription's lowest pending delivery.
const headSQL = `
SELECT event_seq, event_id, next_attempt_at FROM webhook_deliveries
WHERE subscription_id = $1 AND status = 'pending' ORDER BY event_seq LIMIT 1`

const setPumpSQL = `UPDATE webhook_subscriptions SET pump_job_id = $2, pump_until = $3, pump_owner = NULLIF($4::text, '') WHERE id = $1`

// claimSQL starts an attempt: the retry budget counts from the first one,
// and the job becomes the subscription's sender until $4. It returns the
// custom headers the request carries.
const claimSQL = `
WITH a AS (
    UPDATE webhook_deliveries SET first_attempt_at = coalesce(first_attempt_at, now())
    WHERE subscription_id = $1 AND event_seq = $2
)
UPDATE webhook_subscriptions SET pump_job_id = $3, pump_until = $4, pump_owner = NULLIF($5::text, '') WHERE id = $1
RETURNING headers`

const deadSQL = `
UPDATE webhook_deliveries SET status = 'dead', finished_at = now(), last_error = $3, next_attempt_at = NULL,
    claim_job_id = NULL, claim_owner = NULL, claim_until = NULL
WHERE subscription_id = $1 AND event_seq = $2 AND status = 'pending'`

const attemptSQL = `
INSERT INTO webhook_attempts (subscription_id, event_seq, status_code, duration_seconds, error, response_excerpt)
VALUES ($1, $2, $3, $4, NULLIF($5, ''), NULLIF($6, ''))`

// maxRefusalsPerStep bounds how many refused deliveries one transaction
// works through before the job yields.
const maxRefusalsPerStep = 500

// stepTx is one step's transaction: the job it runs for, the subscription
// it locked, and the metric results it counts after the commit.
type stepTx struct {
	d       *Deliverer
	tx      pgx.Tx
	me      sender
	subID   uuid.UUID
	results []string
	// decisions caches authz decisions by space and event type: one
	// transaction sees one snapshot of rights.
	decisions map[[2]string]authz.Decision
}

// step runs one short transaction: record prev's outcome, then decide what
// comes next and, if it is a send, claim it.
func (d *Deliverer) step(ctx context.Context, me sender, subID uuid.UUID, prev *outcome, mayContinue bool) (next, error) {
	return d.inTx(ctx, me, subID, func(t *stepTx) (next, error) { return t.run(ctx, prev, mayContinue) })
}

// inTx runs fn in one short transaction of a step, and counts its metric
// results once it committed.
func (d *Deliverer) inTx(ctx context.Context, me sender, subID uuid.UUID, fn func(t *stepTx) (next, error)) (n next, err error) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return n, fmt.Errorf("deliver %s: begin: %w", subID, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	t := &stepTx{d: d, tx: tx, me: me, subID: subID}
	if n, err = fn(t); err != nil {
		return n, err
	}
	if err = tx.Commit(ctx); err != nil {
		return n, fmt.Errorf("deliver %s: commit: %w", subID, err)
	}
	for _, r := range t.results {
		d.metrics.delivery(r)
	}
	return n, nil
}

// run takes the step's decisions in order: lock the subscription and
// record prev; stop if the subscription is gone, disabled or sent by
// another live job; then find the head, let refused deliveries die without
// a request, and claim the first one that may be sent.
func (t *stepTx) run(ctx context.Context, prev *outcome, mayContinue bool) (next, error) {
	s, snooze, err := t.lockAndRecord(ctx, prev)
	if err != nil || s == nil || snooze != nil {
		return next{snooze: snooze}, err
	}
	if s.pol.Name == PolicyUnordered {
		return next{unordered: true}, nil
	}
	if s.status != StatusActive && !s.probing {
		if s.mine {
			return next{}, t.release(ctx)
		}
		return next{}, nil
	}
	if !s.mine && s.pumpJobID != nil && s.pumpLive {
		return next{}, nil // another job is sending; it will reach our deliveries
	}
	if s.claimsLive {
		// Unordered sends from before the policy changed: order starts
		// once they have ended.
		return t.hold(ctx, time.Second, s.now.Add(time.Second+t.d.cfg.Timeout+leaseMargin))
	}
	for range maxRefusalsPerStep {
		h, n, err := t.findHead(ctx, s, mayContinue)
		if err != nil || h == nil {
			return n, err
		}
		if w := s.throttleWait(); w > 0 {
			n, err := t.hold(ctx, w, s.now.Add(w+t.d.cfg.Timeout+leaseMargin))
			n.pause = w
			return n, err
		}
		ev, v, err := t.judge(ctx, s, h)
		switch {
		case err != nil:
			return next{}, err
		case v == verdictGap:
			return next{}, nil
		case v == verdictRefused:
			continue
		}
		return t.claim(ctx, s, h, ev)
	}
	// Many refusals in a row: yield and come back.
	return t.hold(ctx, 0, s.now.Add(leaseMargin))
}

// lockAndRecord locks the subscription and records prev's outcome. It
// returns a nil subscription when it was deleted, and a snooze when prev's
// delivery waits for a retry: the job stays its sender through the wait.
func (t *stepTx) lockAndRecord(ctx context.Context, prev *outcome) (*subRow, *time.Duration, error) {
	s := &subRow{}
	ps := scanPolicy(&s.pol)
	err := t.tx.QueryRow(ctx, lockSubSQL, t.subID, t.me.jobID, t.me.owner, t.d.cfg.LivenessSettle.Milliseconds()).Scan(append(append(
		[]any{&s.owner, &s.space, &s.url, &s.secret, &s.prevSecret, &s.tokenID, &s.status, &s.pumpJobID, &s.pumpLive, &s.now, &s.pumpUntil},
		ps.dest()...), &s.probing, &s.throttleNext, &s.claimsLive, &s.keeperWake)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("deliver %s: lock subscription: %w", t.subID, err)
	}
	ps.done()
	s.mine = s.pumpJobID != nil && *s.pumpJobID == t.me.jobID
	if prev == nil {
		return s, nil, nil
	}
	r, wait, err := t.d.record(ctx, t.tx, prev)
	if err != nil {
		return nil, nil, err
	}
	t.results = append(t.results, r)
	if wait != nil {
		n, err := t.hold(ctx, *wait, s.now.Add(*wait+t.d.cfg.Timeout+leaseMargin))
		return s, n.snooze, err
	}
	if r != resultName(resultDelivered) || prev.claim.probe { // the subscription may have been disabled or recovered
		if err := t.tx.QueryRow(ctx, `SELECT status, probing FROM webhook_subscriptions WHERE id = $1`, t.subID).Scan(&s.status, &s.probing); err != nil {
			return nil, nil, fmt.Errorf("deliver %s: reread status: %w", t.subID, err)
		}
	}
	return s, nil, nil
}

// head is a subscription's lowest pending delivery.
type head struct {
	seq     int64
	eventID uuid.UUID
	nextAt  *time.Time
}

// findHead returns the head if it may be sent now. Otherwise it returns
// nil and what the job does: nothing pending releases the subscription and
// ends the job; a head waiting for its retry, or a used-up slice, keeps the
// job the sender and snoozes it.
func (t *stepTx) findHead(ctx context.Context, s *subRow, mayContinue bool) (*head, next, error) {
	var h head
	err := t.tx.QueryRow(ctx, headSQL, t.subID).Scan(&h.seq, &h.eventID, &h.nextAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, next{}, t.release(ctx)
	}
	if err != nil {
		return nil, next{}, fmt.Errorf("deliver %s: find head: %w", t.subID, err)
	}
	if h.nextAt != nil && h.nextAt.After(s.now) {
		// The head waits for its retry. Whoever gets here (the job that
		// snoozed, or one that found the claim expired) waits with it.
		n, err := t.hold(ctx, h.nextAt.Sub(s.now), h.nextAt.Add(t.d.cfg.Timeout+leaseMargin))
		return nil, n, err
	}
	if !mayContinue {
		// Slice used up: keep the claim briefly and come back at once,
		// behind the jobs of other subscriptions.
		n, err := t.hold(ctx, 0, s.now.Add(leaseMargin))
		return nil, n, err
	}
	return &h, next{}, nil
}

// verdict is what judge decided about a head.
type verdict int

const (
	// verdictSend: the head may be sent.
	verdictSend verdict = iota
	// verdictRefused: authz refused it; it is dead without a request and
	// the next head comes up.
	verdictRefused
	// verdictGap: its event left the log; the subscription is disabled.
	verdictGap
)

// judge reads the head's event and checks that the owner may receive it.
// A missing event is a gap at the head: order can no longer be kept, so
// the subscription is disabled (cause gap) and the owner must
// resynchronize and enable it again. A refused delivery is dead without
// any request: rights apply at send time, not when the event was matched.
func (t *stepTx) judge(ctx context.Context, s *subRow, h *head) (*sync.Event, verdict, error) {
	ev, err := t.d.eventAt(ctx, t.tx, h.seq)
	if err != nil {
		return nil, 0, fmt.Errorf("deliver %s: read event %d: %w", t.subID, h.seq, err)
	}
	v, err := t.judgeEvent(ctx, s, h, ev)
	return ev, v, err
}

// judgeEvent is judge with the head's event read (nil: retention removed
// it).
func (t *stepTx) judgeEvent(ctx context.Context, s *subRow, h *head, ev *sync.Event) (verdict, error) {
	if ev == nil {
		detail := fmt.Sprintf("event %d left the log (retention) before it was delivered", h.seq)
		if _, err := t.tx.Exec(ctx, deadSQL, t.subID, h.seq, detail); err != nil {
			return 0, fmt.Errorf("deliver %s: gap at %d: %w", t.subID, h.seq, err)
		}
		ct, err := t.tx.Exec(ctx, disableSQL, t.subID, CauseGap, detail)
		if err != nil {
			return 0, fmt.Errorf("deliver %s: disable for gap: %w", t.subID, err)
		}
		if err := noteChange(ctx, t.tx, ct, TypeGap, t.subID, CauseGap, detail, h.seq); err != nil {
			return 0, err
		}
		t.results = append(t.results, "gap")
		t.d.cfg.Logger.WarnContext(ctx, "webhook subscription disabled: gap at head",
			slog.String("subscription", t.subID.String()), slog.Int64("seq", h.seq))
		return verdictGap, nil
	}
	key := [2]string{ev.Space, ev.Type}
	dec, ok := t.decisions[key]
	if !ok {
		var err error
		if dec, err = authz.Allowed(ctx, t.tx, &authz.Request{Action: authz.ActionWebhookDeliver, Principal: s.owner,
			Token: s.tokenID, Space: ev.Space, EventType: ev.Type}); err != nil {
			return 0, fmt.Errorf("deliver %s: authz: %w", t.subID, err)
		}
		if t.decisions == nil {
			t.decisions = map[[2]string]authz.Decision{}
		}
		t.decisions[key] = dec
	}
	if !dec.Allowed {
		msg := "not allowed: " + dec.Reason
		if _, err := t.tx.Exec(ctx, attemptSQL, t.subID, h.seq, nil, 0.0, msg, ""); err != nil {
			return 0, fmt.Errorf("deliver %s: record refusal of %d: %w", t.subID, h.seq, err)
		}
		if _, err := t.tx.Exec(ctx, deadSQL, t.subID, h.seq, msg); err != nil {
			return 0, fmt.Errorf("deliver %s: refuse %d: %w", t.subID, h.seq, err)
		}
		t.results = append(t.results, "dead")
		return verdictRefused, nil
	}
	return verdictSend, nil
}

// claim makes the job the sender of the head and returns the send.
func (t *stepTx) claim(ctx context.Context, s *subRow, h *head, ev *sync.Event) (next, error) {
	body, err := json.Marshal(ev.Envelope())
	if err != nil {
		return next{}, fmt.Errorf("deliver %s: envelope %d: %w", t.subID, h.seq, err)
	}
	var headers map[string]string
	if err := t.tx.QueryRow(ctx, claimSQL, t.subID, h.seq, t.me.jobID, s.now.Add(t.d.cfg.Timeout+leaseMargin), t.me.owner).Scan(&headers); err != nil {
		return next{}, fmt.Errorf("deliver %s: claim %d: %w", t.subID, h.seq, err)
	}
	if th := s.throttleAfter(); th != nil {
		if _, err := t.tx.Exec(ctx, throttleSQL, t.subID, th); err != nil {
			return next{}, fmt.Errorf("deliver %s: throttle: %w", t.subID, err)
		}
	}
	return next{send: &claim{subID: t.subID, seq: h.seq, eventID: h.eventID, operational: isOperational(ev.Type), url: s.url, secret: s.secret,
		previousSecret: s.prevSecret, headers: headers, body: body,
		pol: s.pol, sched: t.d.schedule(&s.pol), probe: s.status != StatusActive, traceParent: ev.TraceParent}}, nil
}

// hold keeps the job the subscription's sender until until and snoozes it
// for wait.
func (t *stepTx) hold(ctx context.Context, wait time.Duration, until time.Time) (next, error) {
	if _, err := t.tx.Exec(ctx, setPumpSQL, t.subID, t.me.jobID, until, t.me.owner); err != nil {
		return next{}, fmt.Errorf("deliver %s: keep sender: %w", t.subID, err)
	}
	return next{snooze: &wait}, nil
}

// release gives up the subscription's sender claim.
func (t *stepTx) release(ctx context.Context) error {
	if _, err := t.tx.Exec(ctx, setPumpSQL, t.subID, nil, nil, ""); err != nil {
		return fmt.Errorf("deliver %s: release sender: %w", t.subID, err)
	}
	return nil
}

// eventAt reads the event at seq, or nil when retention removed it.
func (d *Deliverer) eventAt(ctx context.Context, tx pgx.Tx, seq int64) (*sync.Event, error) {
	evs, err := d.events.EventsAfter(ctx, tx, &sync.EventsAfterParams{AfterSeq: seq - 1, Limit: 1})
	if err != nil || len(evs) == 0 || evs[0].Seq != seq {
		return nil, err
	}
	return &evs[0], nil
}

func resultName(k resultKind) string {
	switch k {
	case resultDelivered:
		return "delivered"
	case resultGone:
		return "gone"
	}
	return "retry"
}

// deliveredSQL records 2xx answers of subscription $1 once: their attempts,
// their deliveries (and own claims) finished, and the highest delivered
// seq.
const deliveredSQL = `
WITH o AS (
    SELECT * FROM unnest($2::bigint[], $3::int[], $4::float8[], $5::text[]) AS o(seq, code, secs, excerpt)
), a AS (
    INSERT INTO webhook_attempts (subscription_id, event_seq, status_code, duration_seconds, response_excerpt)
    SELECT $1, seq, code, secs, NULLIF(excerpt, '') FROM o
), d AS (
    UPDATE webhook_deliveries w SET status = 'delivered', attempts = attempts + 1, finished_at = now(), last_error = NULL,
        next_attempt_at = NULL, claim_job_id = NULL, claim_owner = NULL, claim_until = NULL
    FROM o WHERE w.subscription_id = $1 AND w.event_seq = o.seq AND w.status = 'pending'
    RETURNING w.event_seq
)
UPDATE webhook_subscriptions SET last_delivered_seq = greatest(last_delivered_seq, (SELECT max(event_seq) FROM d))
WHERE id = $1 AND EXISTS (SELECT 1 FROM d)`

// recordDelivered records 2xx answers of one subscription in one
// statement.
func recordDelivered(ctx context.Context, tx pgx.Tx, subID uuid.UUID, outs []*outcome) error {
	if len(outs) == 0 {
		return nil
	}
	seqs, codes := make([]int64, len(outs)), make([]int32, len(outs))
	secs, excerpts := make([]float64, len(outs)), make([]string, len(outs))
	for i, o := range outs {
		seqs[i], codes[i], secs[i], excerpts[i] = o.claim.seq, int32(o.statusCode), o.duration.Seconds(), o.excerpt
	}
	if _, err := tx.Exec(ctx, deliveredSQL, subID, seqs, codes, secs, excerpts); err != nil {
		return fmt.Errorf("deliver %s: mark %v delivered: %w", subID, seqs, err)
	}
	return noteDelivered(ctx, tx, subID, outs)
}

// failedSQL counts a failed attempt and ends the delivery's own claim. With
// $4 set (unordered) it changes nothing unless the claim is still that
// job's: a sender whose claim was taken over records its attempt only.
const failedSQL = `
UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = $3, claim_job_id = NULL, claim_owner = NULL, claim_until = NULL
WHERE subscription_id = $1 AND event_seq = $2 AND status = 'pending' AND ($4::bigint IS NULL OR claim_job_id = $4)
RETURNING attempts, first_attempt_at, now()`

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

// record stores o's attempt and applies its outcome. It returns the metric
// result and, when the subscription's sender waits (an ordered head's
// retry or the next probe), how long.
func (d *Deliverer) record(ctx context.Context, tx pgx.Tx, o *outcome) (string, *time.Duration, error) {
	c := o.claim
	var code *int
	if o.statusCode != 0 {
		code = &o.statusCode
	}
	if o.kind == resultDelivered {
		if err := recordDelivered(ctx, tx, c.subID, []*outcome{o}); err != nil {
			return "", nil, err
		}
		if c.probe {
			if _, err := tx.Exec(ctx, probeRecoveredSQL, c.subID); err != nil {
				return "", nil, fmt.Errorf("deliver %s: recover: %w", c.subID, err)
			}
			d.cfg.Logger.InfoContext(ctx, "webhook subscription recovered: a probe was answered with 2xx",
				slog.String("subscription", c.subID.String()), slog.Int64("seq", c.seq))
		}
		return "delivered", nil, nil
	}
	if _, err := tx.Exec(ctx, attemptSQL, c.subID, c.seq, code, o.duration.Seconds(), o.err, o.excerpt); err != nil {
		return "", nil, fmt.Errorf("deliver %s: record attempt %d: %w", c.subID, c.seq, err)
	}
	if o.kind == resultGone {
		msg := fmt.Sprintf("receiver answered %d Gone", o.statusCode)
		if _, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET attempts = attempts + 1 WHERE subscription_id = $1 AND event_seq = $2`, c.subID, c.seq); err != nil {
			return "", nil, err
		}
		if _, err := tx.Exec(ctx, deadSQL, c.subID, c.seq, msg); err != nil {
			return "", nil, err
		}
		ct, err := tx.Exec(ctx, disableSQL, c.subID, CauseGone, msg)
		if err != nil {
			return "", nil, err
		}
		if err := noteChange(ctx, tx, ct, TypeDisabled, c.subID, CauseGone, msg, c.seq); err != nil {
			return "", nil, err
		}
		return "gone", nil, nil
	}
	return d.recordFailure(ctx, tx, o)
}

// recordFailure counts a failed attempt and decides the delivery's next
// one: a probe waits for the next probe, a delivery past its budget is
// judged by the policy, any other waits its backoff.
func (d *Deliverer) recordFailure(ctx context.Context, tx pgx.Tx, o *outcome) (string, *time.Duration, error) {
	c := o.claim
	var attempts int
	var first *time.Time
	var now time.Time
	err := tx.QueryRow(ctx, failedSQL, c.subID, c.seq, o.err, c.claimJob).Scan(&attempts, &first, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return "retry", nil, nil // no longer pending (skipped meanwhile), or its claim was taken over
	}
	if err != nil {
		return "", nil, fmt.Errorf("deliver %s: mark %d for retry: %w", c.subID, c.seq, err)
	}
	if !c.probe { // a probe's subscription is disabled, and was failing already
		if err := noteFailed(ctx, tx, c, o.err); err != nil {
			return "", nil, err
		}
	}
	var wait time.Duration
	switch {
	case c.probe:
		var probes int
		if err := tx.QueryRow(ctx, `
SELECT count(*) FROM webhook_attempts a JOIN webhook_subscriptions s ON s.id = a.subscription_id
WHERE a.subscription_id = $1 AND a.event_seq = $2 AND a.attempted_at >= s.disabled_at`, c.subID, c.seq).Scan(&probes); err != nil {
			return "", nil, fmt.Errorf("deliver %s: count probes: %w", c.subID, err)
		}
		wait = probeWait(c.sched, max(probes-1, 1), o.retryAfter)
	case first != nil && now.Sub(*first) >= c.sched.budget:
		return d.budgetSpent(ctx, tx, o, attempts, now)
	default:
		wait = backoff(c.sched, attempts, o.retryAfter)
		if first != nil {
			// Never wait past the budget's end by more than needed to notice it.
			wait = min(wait, max(first.Add(c.sched.budget).Sub(now), time.Millisecond))
		}
	}
	if _, err := tx.Exec(ctx, nextAttemptSQL, c.subID, c.seq, now.Add(wait)); err != nil {
		return "", nil, fmt.Errorf("deliver %s: schedule %d: %w", c.subID, c.seq, err)
	}
	if c.claimJob != nil {
		return "retry", nil, nil // unordered: the delivery waits on its own
	}
	return "retry", &wait, nil
}

// budgetSpent ends a delivery whose retry budget is spent, as its policy
// says: dead and go on (ordered_dead_letter, unordered); or the
// subscription is disabled as failing, and either the delivery is dead or,
// with auto_recover, it stays pending as the probe.
func (d *Deliverer) budgetSpent(ctx context.Context, tx pgx.Tx, o *outcome, attempts int, now time.Time) (string, *time.Duration, error) {
	c := o.claim
	msg := fmt.Sprintf("retry budget %s exhausted after %d attempts; last: %s", c.sched.budget, attempts, o.err)
	log := d.cfg.Logger.With(slog.String("subscription", c.subID.String()), slog.Int64("seq", c.seq), slog.Int("attempts", attempts))
	if c.pol.Name != PolicyOrdered {
		if _, err := tx.Exec(ctx, deadSQL, c.subID, c.seq, msg); err != nil {
			return "", nil, fmt.Errorf("deliver %s: dead %d: %w", c.subID, c.seq, err)
		}
		log.InfoContext(ctx, "webhook delivery dead: retry budget spent", slog.String("policy", c.pol.Name))
		return "dead", nil, nil
	}
	if c.pol.AutoRecover {
		wait := probeWait(c.sched, 0, o.retryAfter)
		ct, err := tx.Exec(ctx, probeSQL, c.subID, msg+"; probing with this delivery (auto_recover)")
		if err != nil {
			return "", nil, fmt.Errorf("deliver %s: disable and probe: %w", c.subID, err)
		}
		if err := noteChange(ctx, tx, ct, TypeDisabled, c.subID, CauseFailing, msg, c.seq); err != nil {
			return "", nil, err
		}
		if _, err := tx.Exec(ctx, nextAttemptSQL, c.subID, c.seq, now.Add(wait)); err != nil {
			return "", nil, fmt.Errorf("deliver %s: schedule probe %d: %w", c.subID, c.seq, err)
		}
		log.WarnContext(ctx, "webhook subscription disabled: failing; probing (auto_recover)", slog.Duration("next_probe", wait))
		return "retry", &wait, nil
	}
	if _, err := tx.Exec(ctx, deadSQL, c.subID, c.seq, msg); err != nil {
		return "", nil, err
	}
	ct, err := tx.Exec(ctx, disableSQL, c.subID, CauseFailing, msg)
	if err != nil {
		return "", nil, err
	}
	if err := noteChange(ctx, tx, ct, TypeDisabled, c.subID, CauseFailing, msg, c.seq); err != nil {
		return "", nil, err
	}
	log.WarnContext(ctx, "webhook subscription disabled: failing")
	return "dead", nil, nil
}

// backoff is the wait before retry number attempts: the base doubled per
// attempt, capped at the schedule's max, with jitter over its upper half,
// and at least what the receiver asked for with Retry-After (capped
// likewise).
func backoff(s schedule, attempts int, retryAfter time.Duration) time.Duration {
	w := s.base
	for i := 1; i < attempts && w < s.max; i++ {
		w *= 2
	}
	return jitter(min(w, s.max), retryAfter, s.max)
}

// probeWait is the wait before the next probe after probes failed ones:
// the schedule's max doubled per probe up to an hour (or the max, if that
// is longer), with jitter, and at least Retry-After (capped by the max).
func probeWait(s schedule, probes int, retryAfter time.Duration) time.Duration {
	ceiling := max(s.max, maxProbeWait)
	w := s.max
	for range probes {
		if w >= ceiling {
			break
		}
		w *= 2
	}
	return jitter(min(w, ceiling), retryAfter, s.max)
}

// jitter spreads w over its upper half and raises it to retryAfter capped
// at limit.
func jitter(w, retryAfter, limit time.Duration) time.Duration {
	if w > 1 {
		w = w/2 + rand.N(w/2+1)
	}
	return max(w, min(retryAfter, limit))
}

// send makes one attempt. It holds no transaction and no connection of the
// pool.
func (d *Deliverer) send(ctx context.Context, c *claim) *outcome {
	o := &outcome{claim: c}
	ctx, span := startAttempt(ctx, c)
	defer endAttempt(span, o)
	req, err := newRequest(ctx, c, time.Now())
	if err != nil {
		o.kind, o.err = resultRetry, err.Error()
		return o
	}
	traceRequest(ctx, req)
	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		o.duration = time.Since(start)
		d.metrics.attempt(o.duration)
		o.kind, o.err = resultRetry, scrubURL(err)
		return o
	}
	head := make([]byte, 0, excerptBytes)
	buf := bytes.NewBuffer(head)
	_, rerr := io.Copy(buf, io.LimitReader(resp.Body, int64(min(excerptBytes, d.cfg.MaxResponseBytes))))
	if rerr == nil && d.cfg.MaxResponseBytes > excerptBytes {
		_, rerr = io.Copy(io.Discard, io.LimitReader(resp.Body, int64(d.cfg.MaxResponseBytes-excerptBytes)))
	}
	_ = resp.Body.Close()
	o.duration = time.Since(start)
	d.metrics.attempt(o.duration)
	o.statusCode = resp.StatusCode
	o.excerpt = strings.ToValidUTF8(buf.String(), "\uFFFD")
	for !utf8.ValidString(o.excerpt) {
		o.excerpt = o.excerpt[:len(o.excerpt)-1]
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		o.kind = resultDelivered // a body cut off by the cap does not undo a 2xx
	case resp.StatusCode == http.StatusGone:
		o.kind = resultGone
	default:
		o.kind = resultRetry
		o.err = fmt.Sprintf("receiver answered %s", resp.Status)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			o.err += " (redirects are not followed)"
		}
		o.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if rerr != nil {
			o.err += "; reading body: " + scrubURL(rerr)
		}
	}
	return o
}

// newRequest builds the request of one attempt, signed at ts with the
// subscription's secrets (both during a rotation's overlap): first the
// custom headers, then Content-Type and the signature scheme's headers,
// which no custom header can replace. User-Agent is ours unless the
// subscription sets one. A stored header that the store would refuse (a row
// written by hand) is left out. Errors name no key, no URL and no header
// value.
func newRequest(ctx context.Context, c *claim, ts time.Time) (*http.Request, error) {
	msgID := c.eventID.String()
	sig, err := signature(c.secret, msgID, ts, c.body)
	if err == nil && c.previousSecret != "" {
		var old string
		if old, err = signature(c.previousSecret, msgID, ts, c.body); err == nil {
			sig += " " + old
		}
	}
	if err != nil {
		return nil, errors.New("signing: " + err.Error()) // the error of a bad key names no key
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return nil, errors.New("request: " + scrubURL(err))
	}
	for name, v := range c.headers {
		if canonical, err := headerName(name); err == nil && len(v) <= MaxHeaderValueBytes && validHeaderValue(v) {
			req.Header.Set(canonical, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "bothy-webhooks/1")
	}
	req.Header.Set(standardwebhooks.HeaderWebhookID, msgID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return req, nil
}

// signature returns the v1 signature of the Standard Webhooks scheme.
func signature(secret, msgID string, ts time.Time, body []byte) (string, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return "", errors.New("invalid signing secret")
	}
	return wh.Sign(msgID, ts, body)
}

// scrubURL returns err's text without the target URL: URLs often carry
// credentials (tokens in paths or queries), which must not reach the
// attempt record, logs or metrics.
func scrubURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout") {
		return "timeout: " + err.Error()
	}
	return err.Error()
}

// parseRetryAfter reads delay-seconds or an HTTP date; 0 if absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return time.Duration(min(secs, int64(30*24*time.Hour/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
