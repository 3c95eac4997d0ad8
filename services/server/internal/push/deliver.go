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
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/authz"
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
	// Timeout bounds one request, connect to response headers. Default 10s.
	Timeout time.Duration
	// QueryTimeout bounds each database call of a delivery. Default 5s.
	QueryTimeout time.Duration
	// MaxRetryAfter caps how long a Retry-After can postpone a retry.
	// Default 1h.
	MaxRetryAfter time.Duration
	// PruneEvery is how often a worker deletes the records of sends that
	// no job can need any more (older than TTL plus an hour). Default 1m.
	PruneEvery time.Duration
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
	if c.PruneEvery < 0 {
		return fmt.Errorf("push deliver config: PruneEvery %s must not be negative", c.PruneEvery)
	}
	return nil
}

// DeliverWorker is the River worker of push.deliver: it checks that the
// device still exists, still wants the space and that its principal still
// may read it (authz.ActionPushDeliver), then sends one encrypted message.
// It holds no transaction while it talks to the push service.
//
// A device gets a message at most once per (registration, event), outside
// one window: right after the push service's 2xx the worker records the send
// in push_sends, and a job that runs again (River retried it because its
// completion was lost, or the job of a dead process was made available
// again) finds the record and sends nothing
// (TestDeliver_RunAgainAfterASendSendsNothing). Only a process that dies,
// or loses the database, between the 2xx and that insert (milliseconds)
// leaves no record; the job then sends again. That second copy carries the
// same Topic header (derived from the event ID), so a push service that
// still holds the first one undelivered replaces it (RFC 8030 section 5.4),
// and the same payload; clients deduplicate by its event_id.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]

	db     authz.Querier
	cfg    DeliverConfig
	client *http.Client
	vapid  *vapidSigner

	// retryAt carries a Retry-After from Work to NextRetry, which River
	// calls right after Work returns, in the same process, for the same job,
	// unless the job ends for good (its last attempt): then nothing is
	// stored.
	retryMu retryAfters

	// lastPrune is when this worker last pruned push_sends (unix nanos).
	lastPrune atomic.Int64
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
	c.Timeout = cmp.Or(c.Timeout, 10*time.Second)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, 5*time.Second)
	c.MaxRetryAfter = cmp.Or(c.MaxRetryAfter, time.Hour)
	c.PruneEvery = cmp.Or(c.PruneEvery, time.Minute)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	rt := c.Transport
	if rt == nil {
		rt = newTransport(c.AllowPrivateTargets)
	}
	client := &http.Client{
		Transport: rt,
		Timeout:   c.Timeout,
		// A push service answers; it does not redirect. Following one
		// would send the message somewhere the subscription did not name.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	signer, err := newVAPIDSigner(c.VAPIDPublicKey, c.VAPIDPrivateKey, c.VAPIDSubject, c.Now)
	if err != nil {
		return nil, err
	}
	return &DeliverWorker{db: db, cfg: c, client: client, vapid: signer, retryMu: retryAfters{at: map[int64]time.Time{}}}, nil
}

// newTransport dials only public addresses unless allowPrivate, and keeps
// enough idle connections per host: a handful of push services (one per
// browser vendor) receive all messages.
func newTransport(allowPrivate bool) *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: guardDial(allowPrivate)}
	return &http.Transport{
		Proxy:                 nil, // a proxy would bypass the address guard
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
	}
}

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
	principal    string
	endpoint     string
	p256dh, auth string
	tokenID      *uuid.UUID
	wants        bool
	// sent: the push service already accepted this message.
	sent bool
}

const targetSQL = `
SELECT r.principal, r.endpoint, r.p256dh, r.auth, r.token_id,
       NOT EXISTS (SELECT 1 FROM push_preferences pp WHERE pp.principal = r.principal AND pp.space = $2 AND NOT pp.notify),
       EXISTS (SELECT 1 FROM push_sends s WHERE s.registration_id = r.id AND s.event_seq = $3)
FROM push_registrations r WHERE r.id = $1`

// recordSendSQL is written right after a 2xx; see DeliverWorker.
const recordSendSQL = `
INSERT INTO push_sends (registration_id, event_seq, event_id, status) VALUES ($1, $2, $3, $4)
ON CONFLICT (registration_id, event_seq) DO NOTHING`

// pruneSendsSQL deletes one batch of records older than $1.
const pruneSendsSQL = `
DELETE FROM push_sends WHERE ctid = ANY (ARRAY(SELECT ctid FROM push_sends WHERE sent_at < $1 LIMIT $2))`

// pruneBatch bounds one DELETE of push_sends.
const pruneBatch = 5000

// Timeout bounds a whole job: up to two reads, the request, removing a gone
// registration or recording the send, and a prune now and then.
func (w *DeliverWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.cfg.Timeout + 4*w.cfg.QueryTimeout
}

// Work implements river.Worker.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	a := job.Args
	now := w.cfg.Now()
	t, dec, err := w.check(ctx, &a)
	if err == nil && t.sent {
		w.count(resultAlreadySent)
		return nil
	}
	if age := now.Sub(a.CommittedAt); age > w.cfg.TTL && (w.cfg.TTL > 0 || job.Attempt > 1) {
		return w.cancel(resultExpired, fmt.Errorf("message for seq %d is %s old, past push.ttl %s", a.Seq, age.Round(time.Second), w.cfg.TTL))
	}
	if errors.Is(err, ErrNotFound) {
		return w.cancel(resultDenied, fmt.Errorf("registration %s was removed", a.RegistrationID))
	}
	if err != nil {
		return w.retry(err)
	}
	if t.principal != a.Principal {
		return w.cancel(resultDenied, fmt.Errorf("registration %s now belongs to another principal", a.RegistrationID))
	}
	if !t.wants {
		return w.cancel(resultDenied, fmt.Errorf("principal %q muted space %q", a.Principal, a.Space))
	}
	if !dec.Allowed {
		return w.cancel(resultDenied, fmt.Errorf("push.deliver denied: %s", dec.Reason))
	}

	status, retryAfter, err := w.send(ctx, &a, t)
	switch {
	case err != nil:
		if errors.Is(err, errPrivateTarget) || errors.Is(err, errUnsendable) {
			return w.cancel(resultFailed, err)
		}
		return w.retry(err)
	case status >= 200 && status < 300:
		w.count(resultSent)
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.handoff.Observe(w.cfg.Now().Sub(a.CommittedAt).Seconds())
		}
		w.recordSend(ctx, &a, status)
		w.prune(ctx)
		return nil
	case status == http.StatusNotFound || status == http.StatusGone:
		if err := w.remove(ctx, a.RegistrationID, t.endpoint); err != nil {
			return w.retry(err)
		}
		w.cfg.Logger.InfoContext(ctx, "push subscription gone, registration removed",
			slog.String("registration", a.RegistrationID.String()), slog.Int("status", status), slog.String("host", hostOf(t.endpoint)))
		return w.cancel(resultGone, fmt.Errorf("push service answered %d: subscription gone, registration removed", status))
	case status == http.StatusTooManyRequests || status >= 500:
		// On the last attempt River discards the job without asking
		// NextRetry, which would never take the entry out.
		if retryAfter > 0 && job.Attempt < job.MaxAttempts {
			w.retryMu.Lock()
			w.retryMu.at[job.ID] = now.Add(min(retryAfter, w.cfg.MaxRetryAfter))
			w.retryMu.Unlock()
		}
		return w.retry(fmt.Errorf("push service answered %d (retry after %s)", status, retryAfter))
	default:
		// 400 (bad request), 401/403 (VAPID key does not match the
		// subscription), 413 (too large): trying again cannot help.
		return w.cancel(resultFailed, fmt.Errorf("push service answered %d", status))
	}
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

// check reads the registration and decides push.deliver for the job's
// principal in one round trip. For a registration made through a token,
// the token's current scopes are read in a second round trip, which only
// such devices pay.
func (w *DeliverWorker) check(ctx context.Context, a *DeliverArgs) (target, authz.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	var t target
	found := false
	b := &pgx.Batch{}
	b.Queue(targetSQL, a.RegistrationID, a.Space, a.Seq).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&t.principal, &t.endpoint, &t.p256dh, &t.auth, &t.tokenID, &t.wants, &t.sent)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	req := &authz.Request{Action: authz.ActionPushDeliver, Principal: a.Principal, Space: a.Space, EventType: a.Type}
	pending, err := authz.Queue(b, req)
	if err != nil {
		return t, authz.Decision{}, err
	}
	if err := w.db.SendBatch(ctx, b).Close(); err != nil {
		return t, authz.Decision{}, fmt.Errorf("read registration %s and rights: %w", a.RegistrationID, err)
	}
	if !found {
		return t, authz.Decision{}, ErrNotFound
	}
	if t.tokenID != nil {
		if err := pending.ReadToken(ctx, w.db, *t.tokenID); err != nil {
			return t, authz.Decision{}, err
		}
	}
	dec, err := pending.Decision()
	return t, dec, err
}

// recordSend records that the push service accepted the message. It runs
// even when the job's context ends right after the answer, since the send
// happened. Failing, it logs: the job still completes, and only a run of
// the same job again would send a second copy.
func (w *DeliverWorker) recordSend(ctx context.Context, a *DeliverArgs, status int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.QueryTimeout)
	defer cancel()
	if _, err := w.db.Exec(ctx, recordSendSQL, a.RegistrationID, a.Seq, a.EventID, status); err != nil {
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.unrecorded.Inc()
		}
		w.cfg.Logger.WarnContext(ctx, "push sent but not recorded; a rerun of this job would send it again",
			slog.String("registration", a.RegistrationID.String()), slog.Int64("seq", a.Seq), slog.Any("error", err))
	}
}

// prune deletes, at most once per PruneEvery in this worker, the records of
// sends older than push.ttl plus an hour: no job for them can still run
// (Work cancels older messages before it would send). It runs in the job
// that just sent, after the send and its record, in batches that together
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

// remove deletes a gone registration, unless it was registered again with
// another endpoint meanwhile.
func (w *DeliverWorker) remove(ctx context.Context, id uuid.UUID, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.QueryTimeout)
	defer cancel()
	if _, err := w.db.Exec(ctx, `DELETE FROM push_registrations WHERE id = $1 AND endpoint = $2`, id, endpoint); err != nil {
		return fmt.Errorf("remove gone registration %s: %w", id, err)
	}
	return nil
}

// send encrypts and posts the message (RFC 8030 section 5), and returns
// the status and any Retry-After. No database transaction is open while it
// runs.
func (w *DeliverWorker) send(ctx context.Context, a *DeliverArgs, t target) (int, time.Duration, error) {
	payload, err := json.Marshal(Payload{Space: a.Space, Seq: a.Seq, EventID: a.EventID, Type: a.Type})
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
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: push endpoint is not a valid URL", errUnsendable)
	}
	req.Header.Set("Content-Encoding", "aes128gcm")
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("TTL", strconv.Itoa(int(w.cfg.TTL/time.Second)))
	req.Header.Set("Urgency", w.cfg.Urgency)
	req.Header.Set("Topic", Topic(a.EventID))
	req.Header.Set("Authorization", auth)
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
		return 0, 0, fmt.Errorf("push to %s: %w", hostOf(t.endpoint), err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	resp.Body.Close()
	return resp.StatusCode, parseRetryAfter(resp.Header.Get("Retry-After"), w.cfg.Now()), nil
}

// Topic is the RFC 8030 Topic header of the message about event: its 16
// bytes in unpadded base64url, 22 characters (at most 32 are allowed, from
// the URL-safe alphabet). A push service that still holds an undelivered
// message with the same topic for the subscription replaces it with the
// new one, so a copy sent again by a rerun job while the device was offline
// reaches it once.
func Topic(event uuid.UUID) string { return base64.RawURLEncoding.EncodeToString(event[:]) }

// parseRetryAfter reads delay-seconds or an HTTP date (RFC 9110 10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

func (w *DeliverWorker) cancel(result string, err error) error {
	w.count(result)
	return river.JobCancel(err)
}

func (w *DeliverWorker) retry(err error) error {
	w.count(resultRetry)
	return err
}

func (w *DeliverWorker) count(result string) {
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.deliveries.WithLabelValues(result).Inc()
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
