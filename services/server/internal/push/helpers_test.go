package push_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(dbtest.Background(m),
		// pgx and net/http keep these briefly after Close.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// bundle is what a push test works with: a database with the push tables,
// the real round for the consumer, a real River client with the push.deliver
// worker, and a local push service that decrypts what it gets.
type bundle struct {
	db       *dbtest.DB
	log      *postgres.EventLog
	river    *river.Client[pgx.Tx]
	rounds   *sync.RoundRunner
	consumer *push.Consumer
	registry *push.Registry
	rcv      *pushtest.Receiver
	vapid    push.VAPIDKeys
	worker   *push.DeliverWorker
	started  bool
}

type setupOpts struct {
	respond func(device string) pushtest.Response
	// delay holds the push service's answers (pushtest.ReceiverConfig.Delay).
	delay func(device string) time.Duration
	// records, if not 0, gives the send log a pool of its own of this
	// many connections (DeliverConfig.Records), as the module does.
	records int32
	// deliverCfg adjusts the worker's configuration.
	deliverCfg func(*push.DeliverConfig)
	// consumer configures the consumer and the push.page worker.
	consumer *push.ConsumerConfig
}

func setup(t *testing.T, opts *setupOpts) *bundle {
	t.Helper()
	if opts == nil {
		opts = &setupOpts{}
	}
	db := dbtest.NewDB(t)
	vapid, err := push.GenerateVAPIDKeys()
	require.NoError(t, err)
	rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{VAPIDPublicKey: vapid.Public, Respond: opts.respond, Delay: opts.delay})
	t.Cleanup(rcv.Close)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dc := &push.DeliverConfig{
		VAPIDPublicKey: vapid.Public, VAPIDPrivateKey: vapid.Private, VAPIDSubject: "mailto:ops@bothy.invalid",
		TTL: time.Hour, Urgency: "high", AllowPrivateTargets: true, Logger: logger,
		Metrics: push.NewMetrics(prometheus.NewRegistry()),
	}
	if opts.records > 0 {
		dc.Records = ownPool(t, db.URL, opts.records)
	}
	if opts.deliverCfg != nil {
		opts.deliverCfg(dc)
	}
	worker, err := push.NewDeliverWorker(db.Pool, dc)
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	river.AddWorker(workers, push.NewPageWorker(db.Pool, opts.consumer))
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues:            map[string]river.QueueConfig{push.Queue: {MaxWorkers: 10}},
		Workers:           workers,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            logger,
	})
	require.NoError(t, err)
	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	rounds := sync.NewRoundRunner(db.Pool, postgres.CursorStore{}, log, postgres.NewJobSink(rc, nil), &sync.RoundConfig{Logger: logger})
	b := &bundle{db: db, log: log, river: rc, rounds: rounds, consumer: push.NewConsumer(opts.consumer),
		registry: push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true}), rcv: rcv, vapid: vapid, worker: worker}
	t.Cleanup(func() {
		if b.started {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, rc.Stop(ctx))
		}
	})
	return b
}

// start starts working push.deliver jobs.
func (b *bundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.river.Start(context.Background()))
	b.started = true
}

// member creates a principal with a right on a space.
func (b *bundle) member(t *testing.T, principal, space string, right authz.Right) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, authz.CreatePrincipal(ctx, b.db.Pool, principal, authz.KindUser))
	require.NoError(t, authz.Grant(ctx, b.db.Pool, &authz.GrantParams{Space: space, Principal: principal, Right: right}))
}

// device registers a new device of principal with the local push service.
func (b *bundle) device(t *testing.T, principal, name string) (push.Registration, *pushtest.Device) {
	t.Helper()
	d, endpoint, err := b.rcv.AddDevice(name)
	require.NoError(t, err)
	var s push.Subscription
	s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
	reg, err := b.registry.Register(context.Background(), b.db.Pool, &push.RegisterParams{Principal: principal, Subscription: s})
	require.NoError(t, err)
	return reg, d
}

// write commits one event.
func (b *bundle) write(t *testing.T, space, actor string) sync.Event {
	t.Helper()
	evs, err := b.log.Write(context.Background(), func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
		return []sync.NewEvent{{Space: space, Type: "item.created", Actor: actor, Data: json.RawMessage(`{"secret":"not in the push"}`)}}, nil
	})
	require.NoError(t, err)
	return evs[0]
}

// round runs one round of the push consumer.
func (b *bundle) round(t *testing.T) sync.RoundResult {
	t.Helper()
	res, err := b.rounds.Run(context.Background(), b.consumer)
	require.NoError(t, err)
	require.False(t, res.Locked)
	return res
}

type jobRow struct {
	ID          int64
	State       string
	Args        push.DeliverArgs
	Errors      []string
	ScheduledAt time.Time
	Attempt     int
}

// jobMessage is one message of a job: an event to a device.
type jobMessage struct {
	Seq            int64
	RegistrationID uuid.UUID
	Principal      string
}

// messages lists the job's messages in order.
func (j jobRow) messages() []jobMessage {
	var out []jobMessage
	for _, e := range j.Args.Events {
		for _, d := range e.Devices {
			out = append(out, jobMessage{Seq: e.Seq, RegistrationID: d.RegistrationID, Principal: d.Principal})
		}
	}
	return out
}

func (b *bundle) jobs(t testing.TB) []jobRow {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT id, state::text, args, coalesce((SELECT array_agg(e->>'error') FROM unnest(errors) e), '{}'), scheduled_at, attempt
		 FROM river_job WHERE kind = 'push.deliver' ORDER BY id`)
	require.NoError(t, err)
	var out []jobRow
	for rows.Next() {
		var j jobRow
		var args []byte
		require.NoError(t, rows.Scan(&j.ID, &j.State, &args, &j.Errors, &j.ScheduledAt, &j.Attempt))
		require.NoError(t, json.Unmarshal(args, &j.Args))
		out = append(out, j)
	}
	require.NoError(t, rows.Err())
	return out
}

// waitJobs polls until every push.deliver job is in one of the final or
// waiting states given, or fails after the deadline.
func (b *bundle) waitJobs(t *testing.T, want int, states ...string) []jobRow {
	t.Helper()
	var jobs []jobRow
	testwait.Until(t, 10*time.Second, func() bool {
		jobs = b.jobs(t)
		if len(jobs) != want {
			return false
		}
		for _, j := range jobs {
			ok := false
			for _, s := range states {
				ok = ok || j.State == s
			}
			if !ok {
				return false
			}
		}
		return true
	}, "jobs %+v not all in %v", &jobs, states)
	return jobs
}

func (b *bundle) registrationExists(t *testing.T, reg push.Registration) bool {
	t.Helper()
	_, err := b.registry.Get(context.Background(), b.db.Pool, reg.ID)
	if err == push.ErrNotFound {
		return false
	}
	require.NoError(t, err)
	return true
}
