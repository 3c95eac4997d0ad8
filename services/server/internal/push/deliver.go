package push

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/coalesce"
	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/retryafter"
)

// DeliverConfig configures a DeliverWorker.
type DeliverConfig struct {
	// VAPIDPublicKey and VAPIDPrivateKey sign every request (push.vapid_*).
	// Required; CheckVAPIDKeys must accept them.
	VAPIDPublicKey, VAPIDPrivateKey string
	// VAPIDSubject is the contact in the JWT's sub claim, mailto: or
	// https: (push.vapid_subject). Default "mailto:ops@bothy.invalid".
	VAPIDSubject string
	// TTL is how long the push service keeps an undelivered message
	// (push.ttl); zero is meaningful (deliver now or drop), so there is no
	// default. Retries stop once a message is older than TTL.
	TTL time.Duration
	// Urgency is very-low, low, normal or high (push.urgency). Default normal.
	Urgency string
	// AllowPrivateTargets lets requests reach loopback and private
	// addresses and plain http (push.allow_private_targets). Default false.
	AllowPrivateTargets bool
	// OriginConcurrency is the most requests this worker has in flight to
	// one push service origin, over all its jobs
	// (push.origin_concurrency). Default 16.
	OriginConcurrency int
	// Timeout bounds one request, connect to response headers. Default 10s.
	Timeout time.Duration
	// QueryTimeout bounds each database call of a delivery. Default 5s.
	QueryTimeout time.Duration
	// RightsMaxAge is the oldest a rights decision may be when a request
	// starts (push.rights_max_age); an older one is read again first.
	// Default 1s.
	RightsMaxAge time.Duration
	// MaxRetryAfter caps how long a Retry-After can postpone a retry.
	// Default 1h.
	MaxRetryAfter time.Duration
	// PruneEvery is how often a worker deletes the records of sends that
	// no job can need any more (older than TTL plus an hour). Default 1m.
	PruneEvery time.Duration
	// Records is where the send log writes push_sends: connections of its
	// own, RecordConns of them, so that a record never queues behind the
	// jobs' queries for one of db's (see sendLog). Default: db.
	Records Execer
	// Transport, if set, replaces the guarded transport (tests only).
	Transport http.RoundTripper
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Metrics, if set, counts deliveries.
	Metrics *Metrics
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *DeliverConfig) validate() error {
	if err := CheckVAPIDKeys(c.VAPIDPublicKey, c.VAPIDPrivateKey); err != nil {
		return err
	}
	if !strings.HasPrefix(c.VAPIDSubject, "mailto:") && !strings.HasPrefix(c.VAPIDSubject, "https://") {
		return fmt.Errorf("push.vapid_subject %q: must start with mailto: or https://", c.VAPIDSubject)
	}
	switch c.Urgency {
	case "very-low", "low", "normal", "high":
	default:
		return fmt.Errorf("push.urgency %q: want very-low, low, normal or high", c.Urgency)
	}
	if c.TTL < 0 {
		return fmt.Errorf("push.ttl %s: must not be negative", c.TTL)
	}
	if c.OriginConcurrency < 1 {
		return fmt.Errorf("push.origin_concurrency %d: must be at least 1", c.OriginConcurrency)
	}
	if c.RightsMaxAge < 0 {
		return fmt.Errorf("push.rights_max_age %s: must not be negative", c.RightsMaxAge)
	}
	if c.PruneEvery < 0 {
		return fmt.Errorf("push deliver config: PruneEvery %s must not be negative", c.PruneEvery)
	}
	return nil
}

// Execer runs a statement; *pgxpool.Pool is one.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// DeliverWorker is the River worker of push.deliver. A job is a batch of
// messages (an event to a device); for each, it checks that the device
// still exists and still wants the space and that its principal still may
// read it (authz.ActionPushDeliver), then sends one encrypted message. It
// reads the whole batch, and the rights of all its principals in one
// statement, in one round trip, sends with at most OriginConcurrency
// requests in flight per push service origin, and holds no transaction
// while it talks to push services. A request starts only under a rights
// decision at most RightsMaxAge old (rights): a revocation stops every
// request that starts later than that after it commits.
//
// Every message's final answer is recorded in push_sends as it arrives
// (see sendLog): a 2xx, or a refusal no retry can change; so is a request
// that got no answer (noAnswer). A job that runs again (a retry for the
// batch's messages that got 429, 5xx or no answer, or a rerun because its
// completion was lost or its process died) sends only the messages
// without a final record (TestDeliver_BatchRetrySendsOnlyTheFailedDevices,
// TestDeliver_RunAgainAfterABatchSendsNothing). A message is sent again
// only when its first request got no answer (once: noAnswer), or when its
// record is missing when another run reads the records: the process died
// or lost the database between the 2xx and the record's commit, the
// record's insert failed (bothy_push_sends_unrecorded_total) and the job
// ran again, or two runs of the job overlapped because another worker
// judged this live process dead (package liveness). The second copy
// carries the same Topic header (derived from the event ID), so a push
// service that still holds the first one undelivered replaces it (RFC 8030
// section 5.4), and the same payload; clients deduplicate by its event_id.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]

	db     authz.Querier
	cfg    DeliverConfig
	client *http.Client
	vapid  *vapidSigner
	slots  originSlots
	sends  *sendLog

	// retryAt carries a Retry-After from Work to NextRetry, which River
	// calls right after Work returns, in the same process, for the same job,
	// unless the job ends for good (its last attempt): then nothing is
	// stored.
	retryMu retryAfters

	// lastPrune is when this worker last pruned push_sends (unix nanos).
	lastPrune atomic.Int64

	// slotWait, if set, is called when a send waits for a free slot of its
	// origin (tests).
	slotWait func()
}

type retryAfters struct {
	gosync.Mutex
	at map[int64]time.Time
}

// NewDeliverWorker returns the worker; db is the pool it reads
// registrations and rights from.
func NewDeliverWorker(db authz.Querier, cfg *DeliverConfig) (*DeliverWorker, error) {
	c := *cfg
	c.VAPIDSubject = cmp.Or(c.VAPIDSubject, "mailto:ops@bothy.invalid")
	c.Urgency = cmp.Or(c.Urgency, "normal")
	c.OriginConcurrency = cmp.Or(c.OriginConcurrency, 16)
	c.Timeout = cmp.Or(c.Timeout, 10*time.Second)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	c.RightsMaxAge = cmp.Or(c.RightsMaxAge, time.Second)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, time.Hour)
	c.PruneEvery = cmp.Or(c.PruneEvery, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Records == nil {
		c.Records = db
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	rt := c.Transport
	if rt == nil {
		rt = newTransport(c.AllowPrivateTargets)
	}
	client := egress.Client(rt, c.Timeout)
	signer, err := newVAPIDSigner(c.VAPIDPublicKey, c.VAPIDPrivateKey, c.VAPIDSubject, c.Now)
	if err != nil {
		return nil, err
	}
	w := &DeliverWorker{db: db, cfg: c, client: client, vapid: signer, slots: originSlots{m: map[string]*originSlot{}},
		retryMu: retryAfters{at: map[int64]time.Time{}}}
	w.sends = newSendLog(w)
	return w, nil
}

// newTransport dials only public addresses unless allowPrivate, and keeps
// enough idle connections per host: a handful of push services (one per
// browser vendor) receive all messages.
func newTransport(allowPrivate bool) *http.Transport {
	return egress.Policy{AllowPrivate: allowPrivate}.Transport(egress.TransportConfig{
		DialTimeout:           5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		Refused:               func(err error) error { return fmt.Errorf("%w: %w", errPrivateTarget, err) },
	})
}

// errNoAnswer marks a request that went out in full and got no answer
// (push's request timeout ran out, or the connection broke): the push
// service may have accepted it, so it counts as a try that may have
// delivered (see noAnswer). A request that never went out (no connection,
// a refused dial) is not one.
var errNoAnswer = errors.New("no answer after the request was sent")

// Records in push_sends that are not a push service's answer.
const (
	// statusNoAnswer: a request got no answer (errNoAnswer); the message
	// is tried once more.
	statusNoAnswer int16 = 0
	// statusNoAnswerAgain: the try after it got no answer either; the
	// message is not tried again.
	statusNoAnswerAgain int16 = 1
)

// errUnsendable marks a message that no retry can send: the stored keys or
// endpoint cannot be used (registration checks them, so only a row changed
// behind its back gets here).
var errUnsendable = errors.New("message cannot be built for this registration")

// Payload is what a device receives: where to look, not what changed. The
// client fetches the event with its own rights.
type Payload struct {
	Space   string    `json:"space"`
	Seq     int64     `json:"seq"`
	EventID uuid.UUID `json:"event_id"`
	Type    string    `json:"type"`
}

// target is a registration as a delivery needs it.
type target struct {
	found        bool
	principal    string
	endpoint     string
	p256dh, auth string
	tokenID      *uuid.UUID
	wants        bool
	// recorded is the push service's final answer recorded for this
	// message, if any: 2xx means sent.
	recorded *int16
}

// targetsSQL reads every registration of a batch with its preference for
// the event's space and the recorded answer for the event, if any. A
// registration that is gone has no row. Each lookup is an index probe per
// message: the LIMIT keeps the planner from joining by hashing whole tables,
// which it prefers for a few hundred rows while the tables are small and
// which grows with push_sends.
const targetsSQL = `
SELECT m.ord, r.principal, r.endpoint, r.p256dh, r.auth, r.token_id,
       NOT EXISTS (SELECT 1 FROM push_preferences pp WHERE pp.principal = r.principal AND pp.space = m.space AND NOT pp.notify),
       (SELECT s.status FROM push_sends s WHERE s.registration_id = m.reg AND s.event_seq = m.seq)
FROM unnest($1::uuid[], $2::text[], $3::bigint[]) WITH ORDINALITY AS m(reg, space, seq, ord)
CROSS JOIN LATERAL (SELECT * FROM push_registrations r WHERE r.id = m.reg LIMIT 1) r`

// recordSendsSQL records answers right after they arrive; see
// DeliverWorker. Only a statusNoAnswer record is replaced, by the answer
// (or the silence) of the message's one more try; every other record is
// final. One message answered twice in a batch (two runs of its job at
// once) is written once, a 2xx rather than another status, since an
// update may not touch a row twice in one statement. A registration
// deleted meanwhile is skipped rather than failing the others' records on
// the foreign key.
const recordSendsSQL = `
INSERT INTO push_sends AS s (registration_id, event_seq, event_id, status)
SELECT DISTINCT ON (u.reg, u.seq) u.reg, u.seq, u.event, u.status
FROM unnest($1::uuid[], $2::bigint[], $3::uuid[], $4::smallint[]) AS u(reg, seq, event, status)
WHERE EXISTS (SELECT 1 FROM push_registrations r WHERE r.id = u.reg)
ORDER BY u.reg, u.seq, u.status / 100 = 2 DESC, u.status DESC
ON CONFLICT (registration_id, event_seq) DO UPDATE SET status = EXCLUDED.status WHERE s.status = 0`

// removeGoneSQL deletes gone registrations, each only if its endpoint is
// still the one the push service answered for.
const removeGoneSQL = `
DELETE FROM push_registrations r USING unnest($1::uuid[], $2::text[]) AS g(id, endpoint)
WHERE r.id = g.id AND r.endpoint = g.endpoint`

// pruneSendsSQL deletes one batch of records older than $1.
const pruneSendsSQL = `
DELETE FROM push_sends WHERE ctid = ANY (ARRAY(SELECT ctid FROM push_sends WHERE sent_at < $1 LIMIT $2))`

// pruneBatch bounds one DELETE of push_sends.
const pruneBatch = 5000

// maxJobTimeout bounds a batch job's run, with time left for the records
// and removals that follow, under a minute: the least
// river.rescue_stuck_jobs_after allows. River's rescuer makes a job that
// has run longer than that available again while it still runs, and two
// runs of one batch would both send what neither had recorded yet.
const maxJobTimeout = 45 * time.Second

// Timeout bounds a whole job: the reads, its requests (the batch's share
// of its origin's slots, one request Timeout each), removing gone
// registrations and recording, and a prune now and then, at most
// maxJobTimeout (TestDeliver_TimeoutStaysUnderTheRescue). Messages not
// sent by then are retried.
func (w *DeliverWorker) Timeout(job *river.Job[DeliverArgs]) time.Duration {
	n := 1
	if msgs, err := job.Args.messages(); err == nil {
		n = max(1, len(msgs))
	}
	rounds := (n + w.cfg.OriginConcurrency - 1) / w.cfg.OriginConcurrency
	return min(time.Duration(rounds)*w.cfg.Timeout+4*w.cfg.QueryTimeout, maxJobTimeout)
}

// outcome is what became of one message in one run of its job.
type outcome struct {
	result     string // a result label
	reason     error  // why it was not sent, for the job's error
	retryAfter time.Duration
	counted    bool // already in the metrics
}

// Work implements river.Worker: it sends each message of the batch that
// has no recorded answer yet. The job completes once every message was
// sent or ended for good, is cancelled when none was sent and none can be,
// and otherwise fails so that River retries it, with NextRetry's backoff,
// for the messages still without an answer.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	msgs, err := job.Args.messages()
	if err != nil {
		return river.JobCancel(err)
	}
	out := make([]outcome, len(msgs))
	live := w.expire(job, msgs, out)

	s := &sending{msgs: msgs, out: out}
	if len(live) > 0 {
		if err = w.screen(ctx, s, live); err != nil {
			return err
		}
	}
	for _, o := range out {
		if o.result != "" && !o.counted {
			w.count(o.result)
		}
	}

	// The job's answers reach push_sends through the send log. A job that
	// will run again waits for them, so its retry finds them; one that
	// completes does not: nothing runs it again unless its completion is
	// lost, and then the records have had the same time to be written.
	if len(s.toSend) > 0 {
		w.sendAll(ctx, s)
	}
	err = w.finish(ctx, job, msgs, s.targets, out)
	if err != nil {
		s.recorded.Wait()
	}
	return err
}

// expire gives the messages past push.ttl their outcome in out, counted,
// and returns the others, by index. With a TTL of 0 only a retry expires
// them.
func (w *DeliverWorker) expire(job *river.Job[DeliverArgs], msgs []message, out []outcome) []int {
	now := w.cfg.Now()
	var live []int // messages not expired
	for i, m := range msgs {
		if age := now.Sub(m.ev.CommittedAt); age > w.cfg.TTL && (w.cfg.TTL > 0 || job.Attempt > 1) {
			out[i] = outcome{result: resultExpired, counted: true, reason: fmt.Errorf("message for seq %d is %s old, past push.ttl %s", m.ev.Seq, age.Round(time.Second), w.cfg.TTL)}
			w.count(resultExpired)
			continue
		}
		live = append(live, i)
	}
	return live
}

// sending is one run of a job as sendAll works on it: the job's messages,
// a target and an outcome per message, the messages to send, the batch's
// rights, and the records of its answers not yet written.
type sending struct {
	msgs     []message
	targets  []target
	out      []outcome
	toSend   []int
	rights   *rights
	recorded gosync.WaitGroup
}

// screen reads the registrations and rights of the live messages (check)
// and fills s with a target per message of the batch and the messages to
// send; the other live messages get their outcome in s.out, not yet
// counted. When the read fails, every live message is counted as a retry.
func (w *DeliverWorker) screen(ctx context.Context, s *sending, live []int) error {
	lm := make([]message, len(live))
	for j, i := range live {
		lm[j] = s.msgs[i]
	}
	ts, r, err := w.check(ctx, lm)
	if err != nil {
		w.countN(resultRetry, len(live))
		return err
	}
	s.targets, s.rights = make([]target, len(s.msgs)), r
	for j, i := range live {
		s.targets[i] = ts[j]
		dec := r.decision(keyOf(&s.msgs[i], &ts[j]))
		if o, send := screenOne(&ts[j], &s.msgs[i], &dec); send {
			s.toSend = append(s.toSend, i)
		} else {
			s.out[i] = o
		}
	}
	return nil
}

// screenOne reports whether message m is to be sent to target t, or else
// its outcome: already answered in an earlier run, or not to be sent.
func screenOne(t *target, m *message, dec *authz.Decision) (outcome, bool) {
	switch {
	case t.recorded != nil && *t.recorded/100 == 2:
		return outcome{result: resultAlreadySent}, false
	case t.recorded != nil && *t.recorded == statusNoAnswerAgain:
		// Given up in an earlier run, and counted then.
		return outcome{result: resultFailed, counted: true, reason: fmt.Errorf("push service did not answer twice: %w", errGivenUp)}, false
	case t.recorded != nil && *t.recorded != statusNoAnswer:
		// Refused for good in an earlier run, and counted then.
		return outcome{result: resultFailed, counted: true, reason: fmt.Errorf("push service answered %d", *t.recorded)}, false
	case !t.found:
		return outcome{result: resultDenied, reason: fmt.Errorf("registration %s was removed", m.device.RegistrationID)}, false
	case t.principal != m.device.Principal:
		return outcome{result: resultDenied, reason: fmt.Errorf("registration %s now belongs to another principal", m.device.RegistrationID)}, false
	case !t.wants:
		return outcome{result: resultDenied, reason: fmt.Errorf("principal %q muted space %q", m.device.Principal, m.ev.Space)}, false
	case !dec.Allowed:
		return outcome{result: resultDenied, reason: fmt.Errorf("push.deliver denied: %s", dec.Reason)}, false
	default:
		return outcome{}, true
	}
}

// sendAll sends the messages s.toSend, at most OriginConcurrency at a time
// per origin over the whole worker, hands each final answer to the send
// log as it arrives (s.recorded counts them until written) and fills
// s.out. Messages it could not start before ctx ended are left for a retry.
func (w *DeliverWorker) sendAll(ctx context.Context, s *sending) {
	// A request is started only if it can end before the job does: one
	// cut off in flight may have been delivered without an answer, and
	// its retry would send it twice.
	startCtx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		startCtx, cancel = context.WithDeadline(ctx, deadline.Add(-w.cfg.Timeout))
		defer cancel()
	}
	var wg gosync.WaitGroup
	for k, i := range s.toSend {
		slot, err := w.slots.acquire(startCtx, originOf(s.targets[i].endpoint), w.cfg.OriginConcurrency, w.slotWait)
		if err != nil {
			for _, rest := range s.toSend[k:] {
				s.out[rest] = outcome{result: resultRetry, counted: true, reason: fmt.Errorf("not sent before the job ended: %w", err)}
				w.count(resultRetry)
			}
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer slot.release()
			s.out[i] = w.deliverOne(ctx, s, i)
		}()
	}
	wg.Wait()
}

// deliverOne sends message i of s, under a rights decision at most
// RightsMaxAge old when its request starts, and classifies the answer. A
// 2xx and a final refusal go to the send log at once.
func (w *DeliverWorker) deliverOne(ctx context.Context, s *sending, i int) outcome {
	m, t, recorded := &s.msgs[i], &s.targets[i], &s.recorded
	status, retryAfter, err := w.send(ctx, m, t, s.rights)
	var o outcome
	var denied *deniedError
	switch {
	case errors.As(err, &denied):
		o = outcome{result: resultDenied, reason: err}
	case errors.Is(err, errNoAnswer):
		o = w.noAnswer(m, t, err, recorded)
	case err != nil:
		if errors.Is(err, errPrivateTarget) || errors.Is(err, errUnsendable) {
			o = outcome{result: resultFailed, reason: err}
		} else {
			o = outcome{result: resultRetry, reason: err}
		}
	case status >= 200 && status < 300:
		o = outcome{result: resultSent}
		w.sends.add(m, status, recorded)
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.handoff.Observe(w.cfg.Now().Sub(m.ev.CommittedAt).Seconds())
		}
	case status == http.StatusNotFound || status == http.StatusGone:
		o = outcome{result: resultGone, reason: fmt.Errorf("push service answered %d: subscription gone, registration removed", status)}
	case status == http.StatusTooManyRequests || status >= 500:
		o = outcome{result: resultRetry, reason: fmt.Errorf("push service answered %d (retry after %s)", status, retryAfter), retryAfter: retryAfter}
	default:
		// 400 (bad request), 401/403 (VAPID key does not match the
		// subscription), 413 (too large): trying again cannot help, so
		// the answer is recorded and a retry of the batch skips it.
		o = outcome{result: resultFailed, reason: fmt.Errorf("push service answered %d", status)}
		w.sends.add(m, status, recorded)
	}
	w.count(o.result)
	o.counted = true
	return o
}

// errGivenUp ends a message whose two tries got no answer.
var errGivenUp = errors.New("given up; it may have been delivered")

// noAnswer is the outcome of a request that got no answer (errNoAnswer).
// It may have been delivered, as a push service that answers after push's
// request timeout did: sending it again at every attempt of the job would
// deliver a copy each time. So the first such try is recorded
// (statusNoAnswer) and the message is retried, once; if that try goes
// unanswered too (statusNoAnswerAgain), the message is given up. A message
// is so sent at most twice for want of an answer
// (TestDeliver_UnansweredRequestIsTriedOnceMore). A try answered with 429
// or 5xx, or that never went out, does not count: the service did not
// take it.
func (w *DeliverWorker) noAnswer(m *message, t *target, err error, recorded *gosync.WaitGroup) outcome {
	if t.recorded != nil && *t.recorded == statusNoAnswer {
		w.sends.add(m, int(statusNoAnswerAgain), recorded)
		return outcome{result: resultFailed, reason: fmt.Errorf("%w, the second time: %w", err, errGivenUp)}
	}
	w.sends.add(m, int(statusNoAnswer), recorded)
	return outcome{result: resultRetry, reason: err}
}

// finish removes gone registrations and decides the job's end from its
// messages' outcomes.
func (w *DeliverWorker) finish(ctx context.Context, job *river.Job[DeliverArgs], msgs []message, targets []target, out []outcome) error {
	var goneIDs []uuid.UUID
	var goneEndpoints []string
	var retries, delivered int
	var retryAfter time.Duration
	var firstRetry error
	var reasons []error
	for i, o := range out {
		switch o.result {
		case resultGone:
			goneIDs = append(goneIDs, msgs[i].device.RegistrationID)
			goneEndpoints = append(goneEndpoints, targets[i].endpoint)
		case resultRetry:
			retries++
			retryAfter = max(retryAfter, o.retryAfter)
			if firstRetry == nil {
				firstRetry = o.reason
			}
		case resultSent, resultAlreadySent:
			delivered++
		}
		if o.reason != nil && o.result != resultRetry {
			reasons = append(reasons, o.reason)
		}
	}
	if delivered > 0 {
		w.prune(ctx)
	}
	if len(goneIDs) > 0 {
		if err := w.remove(ctx, goneIDs, goneEndpoints); err != nil {
			// The gone messages have no record: a retry sends them again
			// and meets the same answer.
			return err
		}
		for i, o := range out {
			if o.result == resultGone {
				w.cfg.Logger.InfoContext(ctx, "push subscription gone, registration removed",
					slog.String("registration", msgs[i].device.RegistrationID.String()), slog.String("host", hostOf(targets[i].endpoint)))
			}
		}
	}
	if retries > 0 {
		// On the last attempt River discards the job without asking
		// NextRetry, which would never take the entry out.
		if retryAfter > 0 && job.Attempt < job.MaxAttempts {
			w.retryMu.Lock()
			w.retryMu.at[job.ID] = w.cfg.Now().Add(min(retryAfter, w.cfg.MaxRetryAfter))
			w.retryMu.Unlock()
		}
		if len(msgs) == 1 {
			return firstRetry
		}
		return fmt.Errorf("%d of %d messages to retry, the first: %w", retries, len(msgs), firstRetry)
	}
	if delivered == 0 && len(reasons) > 0 {
		return river.JobCancel(joinReasons(reasons))
	}
	return nil
}

// joinReasons says why messages were not sent: the first few distinct
// reasons, and how many more there were.
func joinReasons(reasons []error) error {
	const show = 3
	seen := map[string]bool{}
	var parts []string
	for _, r := range reasons {
		s := r.Error()
		if seen[s] {
			continue
		}
		seen[s] = true
		parts = append(parts, s)
	}
	if len(parts) == 1 {
		return reasons[0]
	}
	if len(parts) > show {
		parts = append(parts[:show], fmt.Sprintf("and %d more", len(parts)-show))
	}
	return fmt.Errorf("%d messages not sent: %s", len(reasons), strings.Join(parts, "; "))
}

// NextRetry backs off exponentially from 1s up to 1h, with jitter, and
// never earlier than a Retry-After the push service sent.
func (w *DeliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	now := w.cfg.Now()
	n := max(job.Attempt, 1)
	backoff := time.Hour
	if n <= 12 {
		backoff = min(time.Second<<(n-1), time.Hour)
	}
	backoff = backoff - backoff/10 + rand.N(backoff/5+1)
	next := now.Add(backoff)
	w.retryMu.Lock()
	at, ok := w.retryMu.at[job.ID]
	delete(w.retryMu.at, job.ID)
	w.retryMu.Unlock()
	if ok && at.After(next) {
		next = at
	}
	return next
}

// recordLinger is how long the send log lets answers gather before it
// writes them: one insert for many answers, from every job of the worker,
// costs PostgreSQL far less than one each, and it lengthens the window in
// which a crash loses a record by only this much.
const recordLinger = 5 * time.Millisecond

// RecordConns is how many inserts of the send log may run at once, and so
// how many connections DeliverConfig.Records needs: an answer waits for an
// earlier insert only while this many are under way.
const RecordConns = 2

// sendLog writes the answers of every job of a worker to push_sends as
// they arrive: answers gather for recordLinger, then one insert writes all
// that came in meanwhile, without waiting for an earlier insert unless
// RecordConns of them are under way, on connections of its own
// (DeliverConfig.Records) that the jobs' queries do not queue for. So the
// window between an answer and its record is recordLinger and one insert
// however large the batch and however busy the jobs' pool
// (TestDeliver_RecordsEachSendBeforeTheBatchEnds,
// TestDeliver_RecordWaitsForNoOtherWork). It writes even when the job's
// context ends right after the answers, since the sends happened. A
// failed insert is logged and counted: the jobs still go on, and only a
// run of one of them again would send those messages a second time. A job
// that will be retried waits for its own answers to be written (see Work).
type sendLog struct {
	w       *DeliverWorker
	records *coalesce.Batcher[sendRecord]
}

func newSendLog(w *DeliverWorker) *sendLog {
	l := &sendLog{w: w}
	l.records = coalesce.New(l.writeAll, coalesce.Options[sendRecord]{Runners: RecordConns, Linger: recordLinger})
	return l
}

type sendRecord struct {
	reg    uuid.UUID
	seq    int64
	event  uuid.UUID
	status int16
	done   *gosync.WaitGroup
}

// add queues one answer; done is released once it is written or failed.
func (l *sendLog) add(m *message, status int, done *gosync.WaitGroup) {
	done.Add(1)
	l.records.Add(sendRecord{reg: m.device.RegistrationID, seq: m.ev.Seq, event: m.ev.EventID, status: int16(status), done: done})
}

// writeAll writes what came in during a recordLinger with one insert and
// releases each answer's waiter.
func (l *sendLog) writeAll(batch []sendRecord) {
	l.write(batch)
	for _, r := range batch {
		r.done.Done()
	}
}

func (l *sendLog) write(batch []sendRecord) {
	regs := make([][16]byte, len(batch))
	seqs := make([]int64, len(batch))
	events := make([][16]byte, len(batch))
	statuses := make([]int16, len(batch))
	for i, s := range batch {
		regs[i], seqs[i], events[i], statuses[i] = s.reg, s.seq, s.event, s.status
	}
	db := l.w.cfg.Records
	ctx, cancel := context.WithTimeout(context.Background(), l.w.cfg.QueryTimeout)
	defer cancel()
	_, err := db.Exec(ctx, recordSendsSQL, regs, seqs, events, statuses)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		// A registration was deleted between the statement's check and its
		// insert; once more, without it.
		_, err = db.Exec(ctx, recordSendsSQL, regs, seqs, events, statuses)
	}
	if err != nil {
		if l.w.cfg.Metrics != nil {
			l.w.cfg.Metrics.unrecorded.Add(float64(len(batch)))
		}
		l.w.cfg.Logger.WarnContext(ctx, "push sent but not recorded; a rerun of its job would send it again",
			slog.Int("messages", len(batch)), slog.Int64("seq", batch[0].seq), slog.Any("error", err))
	}
}

// prune deletes, at most once per PruneEvery in this worker, the records of
// sends older than push.ttl plus an hour: no job for them can still run
// (Work drops older messages before it would send). It runs in a job that
// just sent, after the sends and their records, in batches that together
// take at most QueryTimeout; what is left waits for the next prune.
func (w *DeliverWorker) prune(ctx context.Context) {
	now := w.cfg.Now()
	last := w.lastPrune.Load()
	if now.UnixNano()-last < int64(w.cfg.PruneEvery) || !w.lastPrune.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	before := now.Add(-w.cfg.TTL - time.Hour)
	ctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	for {
		ct, err := w.db.Exec(ctx, pruneSendsSQL, before, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logger.WarnContext(ctx, "prune push_sends", slog.Any("error", err))
			}
			return
		}
		if ct.RowsAffected() < pruneBatch {
			return
		}
	}
}

// remove deletes gone registrations, each unless it was registered again
// with another endpoint meanwhile.
func (w *DeliverWorker) remove(ctx context.Context, ids []uuid.UUID, endpoints []string) error {
	// The push service said so; the answer holds after the job's time ran out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.QueryTimeout)
	defer cancel()
	if _, err := w.db.Exec(ctx, removeGoneSQL, ids, endpoints); err != nil {
		return fmt.Errorf("remove %d gone registrations: %w", len(ids), err)
	}
	return nil
}

// send encrypts the message, asks rights for a decision no older than
// RightsMaxAge (a *deniedError when it is a no, and no request), and posts
// it (RFC 8030 section 5); it returns the status and any Retry-After. No
// database transaction is open while it runs.
func (w *DeliverWorker) send(ctx context.Context, m *message, t *target, r *rights) (int, time.Duration, error) {
	ev := m.ev
	payload, err := json.Marshal(Payload{Space: ev.Space, Seq: ev.Seq, EventID: ev.EventID, Type: ev.Type})
	if err != nil {
		return 0, 0, err
	}
	body, err := seal(payload, t.p256dh, t.auth)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errUnsendable, err)
	}
	auth, err := w.vapid.authorization(t.endpoint)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errUnsendable, err)
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, t.endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: push endpoint is not a valid URL", errUnsendable)
	}
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("TTL", strconv.Itoa(int(w.cfg.TTL/time.Second)))
	req.Header.Set("Urgency", w.cfg.Urgency)
	req.Header.Set("Topic", Topic(ev.EventID))
	req.Header.Set("Authorization", auth)
	if err := r.allow(ctx, keyOf(m, t)); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	resp, err := w.client.Do(req)
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.send.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL carries the subscription's capability path: keep it out of errors
		}
		if errors.Is(err, errPrivateTarget) {
			return 0, 0, err
		}
		if wrote.Load() {
			return 0, 0, fmt.Errorf("push to %s: %w: %w", hostOf(t.endpoint), errNoAnswer, err)
		}
		return 0, 0, fmt.Errorf("push to %s: %w", hostOf(t.endpoint), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	resp.Body.Close()
	return resp.StatusCode, retryafter.Parse(resp.Header.Get("Retry-After"), w.cfg.Now()), nil
}

// Topic is the RFC 8030 Topic header of the message about event: its 16
// bytes in unpadded base64url, 22 characters (at most 32 are allowed, from
// the URL-safe alphabet). A push service that still holds an undelivered
// message with the same topic for the subscription replaces it with the
// new one, so a copy sent again by a rerun job while the device was offline
// reaches it once.
func Topic(event uuid.UUID) string { return base64.RawURLEncoding.EncodeToString(event[:]) }

func (w *DeliverWorker) count(result string) { w.countN(result, 1) }

func (w *DeliverWorker) countN(result string, n int) {
	if w.cfg.Metrics != nil && n > 0 {
		w.cfg.Metrics.deliveries.WithLabelValues(result).Add(float64(n))
	}
}

// hostOf names an endpoint in logs without its path, which is the
// subscription's capability.
func hostOf(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(unparsable)"
	}
	return u.Host
}

// originOf is the push service an endpoint belongs to: scheme and host.
func originOf(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// originSlots bounds the requests in flight per push service origin over
// every job of a worker. An origin's entry lives while a request to it is
// in flight or waiting, so the map holds only origins in use.
type originSlots struct {
	mu gosync.Mutex
	m  map[string]*originSlot
}

type originSlot struct {
	s      *originSlots
	origin string
	ch     chan struct{}
	users  int // holders and waiters
}

// acquire waits for a free slot of origin (limit slots in all), or until
// ctx ends. wait, if set, is called when the slot is not free at once.
func (s *originSlots) acquire(ctx context.Context, origin string, limit int, wait func()) (*originSlot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	o := s.m[origin]
	if o == nil {
		o = &originSlot{s: s, origin: origin, ch: make(chan struct{}, limit)}
		s.m[origin] = o
	}
	o.users++
	s.mu.Unlock()
	select {
	case o.ch <- struct{}{}:
		return o, nil
	default:
	}
	if wait != nil {
		wait()
	}
	select {
	case o.ch <- struct{}{}:
		return o, nil
	case <-ctx.Done():
		o.leave()
		return nil, ctx.Err()
	}
}

// release frees the slot.
func (o *originSlot) release() {
	<-o.ch
	o.leave()
}

func (o *originSlot) leave() {
	o.s.mu.Lock()
	o.users--
	if o.users == 0 {
		delete(o.s.m, o.origin)
	}
	o.s.mu.Unlock()
}
