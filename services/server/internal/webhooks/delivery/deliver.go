package delivery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/bothy/bothy/services/server/internal/egress"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/eventexpr"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/kinds"
)

// RecordConns is how many connections DeliverConfig.Records needs: the
// recorder runs one flush at a time.
const RecordConns = 1

// DeliverConfig configures a Deliverer.
type DeliverConfig struct {
	// AllowPrivateTargets lets connections reach loopback and private
	// addresses (webhooks.allow_private_targets). Default false.
	AllowPrivateTargets bool
	// Timeout bounds one attempt, connect to last byte read
	// (webhooks.timeout). Default 15s.
	Timeout time.Duration
	// RetryBudget is how long a delivery is retried before its policy
	// decides (webhooks.retry_budget). Default 72h.
	RetryBudget time.Duration
	// MaxResponseBytes is the most of a response body read
	// (webhooks.max_response_bytes). Default 64 KiB.
	MaxResponseBytes int
	// RetryBase is the first retry's wait; it doubles per attempt, with
	// jitter. Default 5s.
	RetryBase time.Duration
	// RetryMax caps one wait, also one asked for by Retry-After. Default 1h.
	RetryMax time.Duration
	// BatchSize is the most deliveries one transaction of a sender claims
	// and records (webhooks.batch_size). Default 100.
	BatchSize int
	// RightsMaxAge is the oldest a rights decision may be when a request
	// starts (webhooks.rights_max_age): a revocation stops every request
	// that starts later than this after it committed. Default 1s.
	RightsMaxAge time.Duration
	// Senders is how many subscriptions one process sends for at once: it
	// must be the webhooks queue's River workers, which the module sets
	// from it (webhooks.senders). Default 200.
	Senders int
	// Linger is how long a sender with nothing to send waits for new
	// deliveries of its subscription before it lets the subscription go,
	// as long as fewer than Senders senders run in the process. Default 2s.
	Linger time.Duration
	// Slice is how long a sender works through its subscription's
	// deliveries without catching up before it yields its worker slot to
	// other subscriptions (it keeps the subscription and comes back at
	// once). Default 5s. The slice starts again when the sender resumes
	// after catching up, while the process has a sender slot to spare.
	Slice time.Duration
	// MaxRun is the longest one job runs: a sender that keeps catching up
	// (a trickle) yields after it, keeping the subscription. Each yield
	// leaves the subscription without a running sender until River
	// fetches the job again. Default: as long as RescueAfter allows, at
	// most a minute and at least Slice.
	MaxRun time.Duration
	// RescueAfter is River's RescueStuckJobsAfter
	// (river.rescue_stuck_jobs_after): a job must end before River takes
	// it for stuck and runs it again. Default 2m.
	RescueAfter time.Duration
	// RecordHold is the longest a sender keeps a batch that drained its
	// subscription and was answered 2xx unrecorded, waiting for the
	// subscription's next deliveries: in a trickle the next wake-up
	// usually comes first, and one step then records the batch and claims
	// the next. A worker lost meanwhile sends the batch again, so this
	// widens the window in which a receiver can see a repeat. Default 250ms.
	RecordHold time.Duration
	// RecordEvery is how often the process's recorder records the 2xx
	// answers its senders have seen since, in one statement for every
	// subscription: a worker lost in the middle of a batch sends again
	// what was in flight and what was answered within this time, not the
	// batch. Default 100ms.
	RecordEvery time.Duration
	// Records is the recorder's own pool (RecordConns connections), so a
	// flush never waits behind the senders' steps for a connection; nil:
	// the recorder uses the Deliverer's pool.
	Records *pgxpool.Pool
	// LivenessSettle is how old the session of a transaction must be
	// before it may judge the process of another sender dead
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
	out.BatchSize = cmp.Or(out.BatchSize, 100)
	out.RightsMaxAge = cmp.Or(out.RightsMaxAge, time.Second)
	out.Senders = cmp.Or(out.Senders, 200)
	out.Linger = cmp.Or(out.Linger, 2*time.Second)
	out.Slice = cmp.Or(out.Slice, 5*time.Second)
	out.RescueAfter = cmp.Or(out.RescueAfter, 2*time.Minute)
	if out.MaxRun == 0 {
		out.MaxRun = max(out.Slice, min(time.Minute, out.RescueAfter-out.jobOverrun()-rescueMargin))
	}
	out.RecordHold = cmp.Or(out.RecordHold, 250*time.Millisecond)
	out.RecordEvery = cmp.Or(out.RecordEvery, 100*time.Millisecond)
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
	case c.BatchSize < 0 || c.Senders < 0:
		return errors.New("webhooks deliver config: BatchSize and Senders must not be negative")
	case c.RightsMaxAge < 0 || c.Linger < 0 || c.Slice < 0 || c.MaxRun < 0 || c.RescueAfter < 0 || c.RecordHold < 0 || c.RecordEvery < 0:
		return errors.New("webhooks deliver config: RightsMaxAge, Linger, Slice, MaxRun, RescueAfter, RecordHold and RecordEvery must not be negative")
	case c.LivenessSettle < 0:
		return errors.New("webhooks deliver config: LivenessSettle must not be negative")
	}
	return nil
}

// dbTimeout bounds every short transaction of a sender.
const dbTimeout = 10 * time.Second

// leaseMargin is added to a sender's lease beyond the attempt's timeout.
const leaseMargin = 30 * time.Second

// lease is how long a step takes the lease for: what may follow it, a
// batch's attempts or a linger, and the margin. A linger is bounded by the
// job's run, not its slice, so it may outlast an attempt's timeout; a
// lease that ran out while its sender lingered would make the rounds
// insert a job for the subscription instead of waking the sender.
func (c *DeliverConfig) lease() time.Duration { return max(c.Timeout, c.Linger) + leaseMargin }

// Deliverer is the River worker of webhook_out.deliver: a job becomes the
// one sender of its subscription, holding its lease (package lease), and works through the subscription's pending
// deliveries in batches (sender.run): one transaction records the last
// batch's outcomes and claims the next, the requests go out with no
// transaction open — in seq order for the ordered policies, up to
// max_in_flight at once for unordered — and so on until nothing is
// pending. An idle sender lingers for new deliveries, which the rounds
// announce to it instead of inserting jobs (wakeOrStart), then lets the
// subscription go.
//
// A lease names the process that took it (its River client ID, when the
// process takes part in package liveness). It is live until lease_until,
// unless its owner's liveness lock is free: then the owner died (SIGKILL, a
// lost host) and the next job of the subscription takes over at once
// (TestDelivery_TakesOverFromADeadSender). What the dead sender had in
// flight is sent again: receivers deduplicate by webhook-id.
type Deliverer struct {
	river.WorkerDefaults[webhooks.DeliverArgs]
	pool    *pgxpool.Pool
	events  sync.EventSource
	dests   *outbound.Destinations
	metrics *Metrics
	cfg     DeliverConfig
	// exprs holds the subscriptions' compiled transforms.
	exprs *eventexpr.Cache

	// running counts the senders of this process; idle is the registry of
	// senders waiting for their subscription's wake-up.
	running atomic.Int64
	idle    idleSenders
	// steps runs the senders' steps that come together as one transaction.
	steps *steps
	// rec records the senders' 2xx answers as they come.
	rec *recorder
	// stopping is closed when the process stops (Run): idle senders end
	// instead of holding River's graceful stop up.
	stopping     chan struct{}
	stoppingOnce gosync.Once
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
	if err := c.underRescue(cfg != nil && cfg.RescueAfter > 0); err != nil {
		return nil, err
	}
	d := &Deliverer{pool: pool, events: events, metrics: metrics, cfg: c,
		idle: idleSenders{m: map[uuid.UUID][]senderEntry{}}, stopping: make(chan struct{}), exprs: eventexpr.NewCache()}
	d.dests = kinds.All.Open(&outbound.OpenParams{Policy: egress.Policy{AllowPrivate: c.AllowPrivateTargets}, Timeout: c.Timeout,
		MaxResponseBytes: c.MaxResponseBytes, Logger: c.Logger})
	d.steps = newSteps(d)
	d.rec = newRecorder(d, c.RecordEvery)
	return d, nil
}

// Run waits for ctx to end, then lets the senders that wait for new
// deliveries end at once, so that stopping River does not wait for their
// linger. It returns nil.
func (d *Deliverer) Run(ctx context.Context) error {
	<-ctx.Done()
	d.stoppingOnce.Do(func() { close(d.stopping) })
	d.dests.Close()
	return nil
}

// Timeout implements river.Worker: a job may use its run, a last batch
// and the release.
func (d *Deliverer) Timeout(*river.Job[webhooks.DeliverArgs]) time.Duration {
	return d.cfg.MaxRun + d.cfg.jobOverrun()
}

// jobOverrun is how long a job may run past MaxRun: a last request, a
// linger, the release.
func (c *DeliverConfig) jobOverrun() time.Duration { return c.Linger + c.Timeout + leaseMargin }

// underRescue refuses, when the rescue was configured, a job timeout that
// River's rescue of stuck jobs does not exceed: River would run the job
// again while it still sends, and both runs would hold its lease.
func (c *DeliverConfig) underRescue(configured bool) error {
	timeout := c.MaxRun + c.jobOverrun()
	if !configured || timeout < c.RescueAfter {
		return nil
	}
	return fmt.Errorf("river.rescue_stuck_jobs_after (%s) must exceed a webhook delivery job's timeout (%s: a run of at least %s, "+
		"webhooks.sender_linger %s, webhooks.timeout %s and %s): River would start the job again while it still sends; "+
		"raise river.rescue_stuck_jobs_after or lower webhooks.timeout or webhooks.sender_linger",
		c.RescueAfter, timeout, c.MaxRun, c.Linger, c.Timeout, leaseMargin)
}

// rescueMargin is what a job's timeout leaves before River's rescue.
const rescueMargin = 10 * time.Second

// shortRetries is how many failed runs of a delivery job come back within
// seconds (NextRetry); later ones take River's default backoff.
const shortRetries = 10

// NextRetry implements river.Worker. A delivery job fails only on database
// trouble (a receiver's failures are waits), and while it waits for its
// retry the subscription's deliveries wait too. Its first shortRetries
// retries come after 1 s, doubling up to 30 s, with up to 10% jitter, so
// sending resumes within seconds of the database coming back rather than
// after River's default of 16 s, then 81 s, then 256 s; later ones take
// River's default, which spreads the 25 attempts over weeks.
func (d *Deliverer) NextRetry(job *river.Job[webhooks.DeliverArgs]) time.Time {
	if job.Attempt < 1 || job.Attempt > shortRetries {
		return time.Time{}
	}
	back := min(time.Second<<(job.Attempt-1), 30*time.Second)
	return time.Now().Add(back + rand.N(back/10+1))
}

// Work implements river.Worker: the job is its subscription's sender for
// one run.
func (d *Deliverer) Work(ctx context.Context, job *river.Job[webhooks.DeliverArgs]) error {
	d.running.Add(1)
	defer d.running.Add(-1)
	now := time.Now()
	s := &sender{d: d, subID: job.Args.SubscriptionID, start: now, sliceStart: now, runFor: d.cfg.MaxRun - rand.N(d.cfg.MaxRun/4+1),
		me: holder{jobID: job.ID, owner: liveness.OwnerOf(job.AttemptedBy)}}
	s.wake = d.idle.add(s.subID, job.ID)
	defer d.idle.remove(s.subID, s.wake)
	return s.run(ctx)
}

// Wake wakes the idle senders of this process named in payload: the
// subscription ids a round (or a recover) gave new deliveries, comma
// separated. An empty payload wakes every idle sender: the listener
// reconnected and may have missed some.
func (d *Deliverer) Wake(payload string) { d.idle.wake(payload) }

var _ webhooks.LocalSenders = (*Deliverer)(nil)

// Holds implements webhooks.LocalSenders: whether job, a sender of
// subscription sub, runs in this process.
func (d *Deliverer) Holds(sub uuid.UUID, job int64) bool { return d.idle.holds(sub, job) }

// WakeIDs implements webhooks.LocalSenders: it wakes this process's
// senders of subscriptions ids.
func (d *Deliverer) WakeIDs(ids []uuid.UUID) { d.idle.wakeIDs(ids) }

// idleSenders is the registry of senders waiting for new deliveries. A
// subscription may have more than one job in a process for a moment (one
// that finds the other's lease live ends at once), so each has its own
// channel: the one that ends must not take the live sender's wake-ups.
type idleSenders struct {
	mu gosync.Mutex
	m  map[uuid.UUID][]senderEntry
}

// senderEntry is one job of a subscription's in this process.
type senderEntry struct {
	job int64
	ch  chan struct{}
}

// add registers the sender of job for subID and returns its wake-up
// channel.
func (r *idleSenders) add(subID uuid.UUID, job int64) chan struct{} {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	r.m[subID] = append(r.m[subID], senderEntry{job: job, ch: ch})
	r.mu.Unlock()
	return ch
}

// remove unregisters the sender of ch.
func (r *idleSenders) remove(subID uuid.UUID, ch chan struct{}) {
	r.mu.Lock()
	if left := slices.DeleteFunc(r.m[subID], func(e senderEntry) bool { return e.ch == ch }); len(left) > 0 {
		r.m[subID] = left
	} else {
		delete(r.m, subID)
	}
	r.mu.Unlock()
}

// holds says whether job, a sender of subID, runs in this process.
func (r *idleSenders) holds(subID uuid.UUID, job int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.m[subID], func(e senderEntry) bool { return e.job == job })
}

func (r *idleSenders) wake(payload string) {
	if payload == "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, es := range r.m {
			for _, e := range es {
				signal(e.ch)
			}
		}
		return
	}
	var ids []uuid.UUID
	for id := range strings.SplitSeq(payload, ",") {
		if u, err := uuid.Parse(id); err == nil {
			ids = append(ids, u)
		}
	}
	r.wakeIDs(ids)
}

// wakeIDs wakes the senders of subscriptions ids.
func (r *idleSenders) wakeIDs(ids []uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		for _, e := range r.m[id] {
			signal(e.ch)
		}
	}
}

// signal wakes the sender of ch unless a wake-up waits for it already.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
