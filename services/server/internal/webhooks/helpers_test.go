package webhooks_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest"
	"github.com/bothy/bothy/services/server/internal/webhooks/webhookstest/recvtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bundle is a test's database, River client (not started until start),
// round runner and metrics registry.
type bundle struct {
	db        *dbtest.DB
	log       *postgres.EventLog
	river     *river.Client[pgx.Tx]
	rounds    *sync.RoundRunner
	consumer  *webhooks.Consumer
	deliverer *delivery.Deliverer
	reg       *prometheus.Registry
	started   bool
}

// testSenders is the webhooks queue's River workers in a bundle, and the
// senders its deliverer counts on.
const testSenders = 20

// fastRetries makes retries quick enough for tests.
func fastRetries() *delivery.DeliverConfig {
	return &delivery.DeliverConfig{AllowPrivateTargets: true, Timeout: 2 * time.Second, RetryBase: 10 * time.Millisecond,
		RetryMax: 40 * time.Millisecond, RetryBudget: time.Hour, Senders: testSenders, Logger: quiet}
}

func setup(t testing.TB, cfg *delivery.DeliverConfig) *bundle {
	t.Helper()
	return setupWith(t, &bundleOpts{cfg: cfg})
}

// setupConns is setup with a pool of maxConns connections (0: dbtest's).
func setupConns(t testing.TB, cfg *delivery.DeliverConfig, maxConns int32) *bundle {
	t.Helper()
	return setupWith(t, &bundleOpts{cfg: cfg, maxConns: maxConns})
}

// bundleOpts adjusts setupWith; the zero value is setup's.
type bundleOpts struct {
	cfg *delivery.DeliverConfig // nil: fastRetries()
	// maxConns sizes the pool; 0: dbtest's.
	maxConns int32
	// source, if set, wraps the event log the deliverer reads events from
	// (rounds read the log itself).
	source func(sync.EventSource) sync.EventSource
	// workers, if set, adds workers next to the deliverer.
	workers func(*river.Workers, *postgres.EventLog)
	// retry, if set, is River's retry policy.
	retry river.ClientRetryPolicy
}

// setupWith makes a bundle: a fresh database with alice able to read s1,
// the deliverer (and o.workers) on River, not started, and the round
// runner of the webhooks consumer.
func setupWith(t testing.TB, o *bundleOpts) *bundle {
	t.Helper()
	cfg := o.cfg
	if cfg == nil {
		cfg = fastRetries()
	}
	db := dbtest.NewDB(t)
	if o.maxConns > 0 {
		pc, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		pc.MaxConns = o.maxConns
		pool, err := pgxpool.NewWithConfig(context.Background(), pc)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		db = &dbtest.DB{Pool: pool, URL: db.URL, Name: db.Name}
	}
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	var source sync.EventSource = log
	if o.source != nil {
		source = o.source(log)
	}
	reg := prometheus.NewRegistry()
	del, err := delivery.NewDeliverer(db.Pool, source, delivery.NewMetrics(reg, db.Pool, log, quiet), cfg)
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, del)
	if o.workers != nil {
		o.workers(workers, log)
	}
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{webhooks.Queue: {MaxWorkers: cmp.Or(cfg.Senders, testSenders)}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		RetryPolicy:       o.retry,
		Logger:            quiet,
	})
	require.NoError(t, err)
	b := &bundle{db: db, log: log, river: rc, deliverer: del, consumer: webhooks.NewConsumer(&webhooks.ConsumerConfig{LivenessSettle: cfg.LivenessSettle}), reg: reg,
		rounds: sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, postgres.NewJobSink(rc, nil), &sync.RoundConfig{Logger: quiet})}
	// At the end of a test, River cancels the jobs still running: a sender
	// in the middle of its slice (waiting out a retry, say) would otherwise
	// hold the stop until the slice ends.
	t.Cleanup(func() {
		if b.started {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rc.StopAndCancel(ctx)
		}
	})
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	require.NoError(t, authz.Grant(ctx, db.Pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightRead}))
	return b
}

// start starts River, and the listener that wakes idle senders as the
// worker role's does: delivery jobs run from now on.
func (b *bundle) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := postgres.NewListener(func() {}, &postgres.ListenerConfig{ConnString: b.db.URL, Logger: quiet,
		Channels: map[string]func(string){webhooks.WakeChannel: b.deliverer.Wake}})
	done := make(chan struct{}, 2)
	go func() { _ = l.Run(ctx); done <- struct{}{} }()
	go func() { _ = b.deliverer.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done }) // before River stops: idle senders end at once
	require.NoError(t, b.river.Start(context.Background()))
	b.started = true
}

// startWithoutListener starts River and the deliverer but no listener:
// senders hear of new deliveries only from a round of this process.
func (b *bundle) startWithoutListener(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = b.deliverer.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	require.NoError(t, b.river.Start(context.Background()))
	b.started = true
}

// subscribe creates a subscription of alice on s1 (loopback allowed).
func (b *bundle) subscribe(t testing.TB, p *webhooks.CreateParams) (*webhooks.Subscription, string) {
	t.Helper()
	if p.Owner == "" {
		p.Owner = "alice"
	}
	if p.Space == "" {
		p.Space = "s1"
	}
	p.AllowPrivateTargets = true
	s, secret, err := webhooks.Create(context.Background(), b.db.Pool, postgres.CursorStore{}, p)
	require.NoError(t, err)
	return s, secret
}

// emit commits n events of type item.created in space, in one transaction.
func (b *bundle) emit(t testing.TB, space string, n int) []sync.Event {
	t.Helper()
	evs, err := b.log.Write(context.Background(), func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		out := make([]sync.NewEvent, n)
		for i := range out {
			out[i] = sync.NewEvent{Space: space, Type: "item.created", Actor: "bob", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		}
		return out, nil
	})
	require.NoError(t, err)
	return evs
}

// round runs the webhooks consumer until it has read everything.
func (b *bundle) round(t testing.TB) sync.RoundResult {
	t.Helper()
	var total sync.RoundResult
	for {
		res, err := b.rounds.Run(context.Background(), b.consumer)
		require.NoError(t, err)
		total.Events += res.Events
		total.Jobs += res.Jobs
		if res.Lost.Len() > 0 {
			total.Lost = res.Lost
		}
		if !res.Full {
			return total
		}
	}
}

func (b *bundle) sub(t testing.TB, id uuid.UUID) *webhooks.Subscription {
	t.Helper()
	s, err := webhooks.Get(context.Background(), b.db.Pool, id)
	require.NoError(t, err)
	return s
}

func (b *bundle) deliveryStatus(t testing.TB, id uuid.UUID, seq int64) string {
	t.Helper()
	var st string
	err := b.db.Pool.QueryRow(context.Background(), `SELECT status FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = $2`, id, seq).Scan(&st)
	require.NoError(t, err)
	return st
}

// request is what a receiver saw.
type request = webhookstest.Arrival

// receiver is the kit's receiver with one endpoint, a test's subscription
// URL. It answers by respond (200 if nil), given the request and how many
// requests for its seq came so far, this one included; with a secret set
// (setSecret) it verifies every request with the Standard Webhooks library,
// independently of the sender's code.
type receiver struct {
	*webhookstest.Endpoint
	srv *webhookstest.Server
}

func newReceiver(t testing.TB, respond func(r request, n int) (int, map[string]string)) *receiver {
	t.Helper()
	srv := recvtest.Start(t, nil)
	rv := &receiver{Endpoint: srv.Endpoint(""), srv: srv}
	if respond != nil {
		rv.SetRule(func(a *webhookstest.Arrival) webhookstest.Answer {
			status, hdr := respond(*a, a.Attempt)
			return webhookstest.Answer{Status: status, Header: hdr}
		})
	}
	return rv
}

func (rv *receiver) setSecret(t testing.TB, secret string) {
	t.Helper()
	require.NoError(t, rv.SetSecret(secret))
}

func (rv *receiver) requests() []request { return rv.Arrivals() }

func (rv *receiver) count() int { return rv.Count() }

func (rv *receiver) url() string { return rv.srv.URL("") }

func seqsOf(rs []request) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Seq
	}
	return out
}

// counter reads bothy_webhook_deliveries_total{result}.
func (b *bundle) counter(t testing.TB, result string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "bothy_webhook_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// steps is bothy_webhook_sender_steps_total.
func (b *bundle) steps(t testing.TB) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "bothy_webhook_sender_steps_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// waitCounter waits for the counter to reach want (it is counted right
// after the commit that made the outcome visible).
func (b *bundle) waitCounter(t testing.TB, result string, want float64) {
	t.Helper()
	testwait.Until(t, 5*time.Second, func() bool { return b.counter(t, result) >= want }, "counter %s reaches %v", result, want)
	require.Equal(t, want, b.counter(t, result))
}

// pending is how many deliveries of subscription id are pending.
func (b *bundle) pending(t testing.TB, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_deliveries WHERE subscription_id = $1 AND status = 'pending'`, id).Scan(&n))
	return n
}

// workerProcessWith is what a worker process runs for webhooks: its
// liveness lock and a River client with the delivery worker and slots
// worker slots, under the lock's ID.
func workerProcessWith(t *testing.T, b *bundle, cfg *delivery.DeliverConfig, slots int) (*liveness.Holder, *river.Client[pgx.Tx]) {
	t.Helper()
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: b.db.URL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	del, err := delivery.NewDeliverer(b.db.Pool, postgres.NewEventLog(b.db.Pool, nil), nil, cfg)
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, del)
	rc, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
		ID:                   h.ID(),
		Queues:               map[string]river.QueueConfig{webhooks.Queue: {MaxWorkers: slots}},
		Workers:              workers,
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    20 * time.Millisecond,
		RescueStuckJobsAfter: 10 * time.Minute,
		Logger:               quiet,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rc.StopAndCancel(ctx)
	})
	return h, rc
}
