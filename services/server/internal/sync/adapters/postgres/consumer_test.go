package postgres_test

import (
	"context"
	"errors"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// drain runs rounds until one reads less than a full batch.
// drain runs rounds until one reads less than a batch. A round that finds
// the cursor locked is tried again until a deadline: a backend killed with
// pg_terminate_backend reports the error to its client before it has
// released its locks, so the next round may still meet the old one.
func drain(t *testing.T, rounds *sync.RoundRunner, c sync.Consumer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := rounds.Run(context.Background(), c)
		require.NoError(t, err)
		if res.Locked {
			require.True(t, time.Now().Before(deadline), "cursor %q still locked after 10s", c.Name())
			time.Sleep(5 * time.Millisecond) // polling with a deadline
			continue
		}
		if !res.Full {
			return
		}
	}
}

// requireExactlyOnce checks that seqs 1..n each have exactly one job.
func requireExactlyOnce(t *testing.T, b *bundle, consumer string, n int64) {
	t.Helper()
	seqs := jobSeqs(t, b.db, consumer)
	var missing, dup []int64
	for s := int64(1); s <= n; s++ {
		switch seqs[s] {
		case 1:
		case 0:
			missing = append(missing, s)
		default:
			dup = append(dup, s)
		}
	}
	require.Empty(t, missing, "events without a job")
	require.Empty(t, dup, "events with more than one job")
	require.Len(t, seqs, int(n), "jobs for seqs outside 1..n")
}

// startWorker runs a Worker for c on its own pool (as a separate process
// would) until the test ends.
func startWorker(t *testing.T, b *bundle, c sync.Consumer, cfg *sync.WorkerConfig, listen *postgres.ListenerConfig) *sync.Worker {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), b.db.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	log := postgres.NewEventLog(pool, nil)
	rounds := sync.NewRoundRunner(pool, postgres.CursorStore{}, log, postgres.NewJobSink(b.river, nil), &sync.RoundConfig{BatchSize: 50})
	w, err := sync.NewWorker(rounds, []sync.Consumer{c}, cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg gosync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	if listen != nil {
		listen.ConnString = b.db.URL
		l := postgres.NewListener(w.Wake, listen)
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func TestConsumersTwoWorkersExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "twin")

	var rounds [2]atomic.Int64
	for i := range 2 {
		startWorker(t, b, &recordingConsumer{name: "twin"}, &sync.WorkerConfig{
			PollInterval: 20 * time.Millisecond,
			AfterRound: func(_ string, res sync.RoundResult, err error) {
				if err == nil && !res.Locked && res.Events > 0 {
					rounds[i].Add(1)
				}
			},
		}, &postgres.ListenerConfig{})
	}

	// Producers append while both workers run, so rounds race for real.
	const producers, each = 8, 100
	var wg gosync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() { defer wg.Done(); appendN(t, b.log, each) }()
	}
	wg.Wait()
	const n = producers * each
	eventually(t, 30*time.Second, func() bool { return cursorOf(t, b.db, "twin") == n }, "cursor did not reach %d", n)
	requireExactlyOnce(t, b, "twin", n)
	t.Logf("rounds with events: worker A %d, worker B %d", rounds[0].Load(), rounds[1].Load())
}

// faultSink inserts jobs and then runs fault, still inside the round's
// transaction: the jobs exist but are not committed.
type faultSink struct {
	sync.JobSink
	fault func(ctx context.Context, tx pgx.Tx) error
}

func (s *faultSink) InsertJobs(ctx context.Context, tx pgx.Tx, jobs []sync.Job) (int, error) {
	n, err := s.JobSink.InsertJobs(ctx, tx, jobs)
	if err != nil {
		return n, err
	}
	if s.fault != nil {
		if err := s.fault(ctx, tx); err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestConsumerCrashMidRoundNoDuplicates(t *testing.T) {
	t.Parallel()

	// Each case breaks the first round after its jobs were inserted, then
	// lets later rounds run normally.
	cases := []struct {
		name  string
		fault func(t *testing.T, b *bundle, cancel context.CancelFunc) func(ctx context.Context, tx pgx.Tx) error
	}{
		{"TerminatedBackend", func(t *testing.T, b *bundle, _ context.CancelFunc) func(context.Context, pgx.Tx) error {
			return func(ctx context.Context, tx pgx.Tx) error {
				var pid int
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return err
				}
				// Another session kills this round's backend, as a crash or
				// an operator would.
				_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
				require.NoError(t, err)
				return nil
			}
		}},
		{"HandlerError", func(*testing.T, *bundle, context.CancelFunc) func(context.Context, pgx.Tx) error {
			return func(context.Context, pgx.Tx) error { return errors.New("receiver lookup failed") }
		}},
		{"Panic", func(*testing.T, *bundle, context.CancelFunc) func(context.Context, pgx.Tx) error {
			return func(context.Context, pgx.Tx) error { panic("bug in consumer") }
		}},
		{"CancelledContext", func(_ *testing.T, _ *bundle, cancel context.CancelFunc) func(context.Context, pgx.Tx) error {
			return func(context.Context, pgx.Tx) error { cancel(); return nil }
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, 100)
			addConsumer(t, b.db, "crash")
			appendN(t, b.log, 30)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sink := &faultSink{JobSink: postgres.NewJobSink(b.river, nil)}
			sink.fault = tc.fault(t, b, cancel)
			rounds := sync.NewRoundRunner(b.db.Pool, postgres.CursorStore{}, b.log, sink, &sync.RoundConfig{BatchSize: 100})
			c := &recordingConsumer{name: "crash"}

			_, err := rounds.Run(ctx, c)
			require.Error(t, err)
			if tc.name == "Panic" {
				require.ErrorIs(t, err, sync.ErrRoundPanicked)
			}
			require.Empty(t, jobSeqs(t, b.db, "crash"), "jobs of the failed round survived")
			require.Zero(t, cursorOf(t, b.db, "crash"), "cursor of the failed round moved")

			sink.fault = nil
			drain(t, rounds, c)
			require.Equal(t, int64(30), cursorOf(t, b.db, "crash"))
			requireExactlyOnce(t, b, "crash", 30)
		})
	}
}

func TestConsumerWakesOnNotify(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "notified")
	connected := make(chan struct{}, 4)
	first := make(chan struct{})
	var once gosync.Once
	startWorker(t, b, &recordingConsumer{name: "notified"}, &sync.WorkerConfig{
		PollInterval: time.Hour, // only a notification can wake it in time
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, &postgres.ListenerConfig{OnConnect: func(uint32) { connected <- struct{}{} }})
	<-connected
	<-first

	appendN(t, b.log, 3)
	eventually(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "notified") == 3 }, "no round after NOTIFY")
	requireExactlyOnce(t, b, "notified", 3)
}

func TestConsumerWakesOnPoll(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "polled")
	silent := postgres.NewEventLog(b.db.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
	first := make(chan struct{})
	var once gosync.Once
	// No listener at all: the poll is the only way to wake.
	startWorker(t, b, &recordingConsumer{name: "polled"}, &sync.WorkerConfig{
		PollInterval: 50 * time.Millisecond,
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, nil)
	<-first
	appendN(t, silent, 3)
	eventually(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "polled") == 3 }, "no round after poll interval")
	requireExactlyOnce(t, b, "polled", 3)
}

func TestConsumerListenLossLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, 50)
	addConsumer(t, b.db, "relisten")

	pids := make(chan uint32, 4)
	var attempts atomic.Int32
	release := make(chan struct{})
	first := make(chan struct{})
	var once gosync.Once
	startWorker(t, b, &recordingConsumer{name: "relisten"}, &sync.WorkerConfig{
		PollInterval: time.Hour, // without the wake after reconnect the events would wait an hour
		AfterRound:   func(string, sync.RoundResult, error) { once.Do(func() { close(first) }) },
	}, &postgres.ListenerConfig{
		MinBackoff: time.Millisecond,
		BeforeConnect: func(ctx context.Context) {
			if attempts.Add(1) == 2 { // hold the first reconnect until events committed unheard
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		},
		OnConnect: func(pid uint32) { pids <- pid },
	})
	pid := <-pids
	<-first

	_, err := b.db.Pool.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
	require.NoError(t, err)
	eventually(t, 10*time.Second, func() bool { return attempts.Load() >= 2 }, "listener did not try to reconnect")

	appendN(t, b.log, 5) // nobody is listening: these notifications are lost
	require.Zero(t, cursorOf(t, b.db, "relisten"))
	close(release)
	<-pids
	eventually(t, 20*time.Second, func() bool { return cursorOf(t, b.db, "relisten") == 5 }, "events committed during the outage were not read after reconnect")
	requireExactlyOnce(t, b, "relisten", 5)
}

// checkingCursors runs check after the real Advance, inside the round.
type checkingCursors struct {
	postgres.CursorStore
	check func(ctx context.Context, tx pgx.Tx) error
}

func (c checkingCursors) Advance(ctx context.Context, tx pgx.Tx, name string, lastSeq int64) error {
	if err := c.CursorStore.Advance(ctx, tx, name, lastSeq); err != nil {
		return err
	}
	return c.check(ctx, tx)
}

func TestConsumerRoundJobsAndCursorCommitTogether(t *testing.T) {
	t.Parallel()

	t.Run("InvisibleUntilCommitThenBoth", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		addConsumer(t, b.db, "together")
		appendN(t, b.log, 10)
		var inRound bool
		cursors := checkingCursors{check: func(ctx context.Context, tx pgx.Tx) error {
			inRound = true
			// Inside the round both are written...
			var jobsInTx int
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'test.consumer'`).Scan(&jobsInTx))
			require.Equal(t, 10, jobsInTx)
			// ...and outside it neither is visible yet.
			require.Empty(t, jobSeqs(t, b.db, "together"), "jobs visible before the round committed")
			require.Zero(t, cursorOf(t, b.db, "together"), "cursor visible before the round committed")
			return nil
		}}
		rounds := sync.NewRoundRunner(b.db.Pool, cursors, b.log, postgres.NewJobSink(b.river, nil), &sync.RoundConfig{BatchSize: 100})
		_, err := rounds.Run(context.Background(), &recordingConsumer{name: "together"})
		require.NoError(t, err)
		require.True(t, inRound)
		require.Equal(t, int64(10), cursorOf(t, b.db, "together"))
		requireExactlyOnce(t, b, "together", 10)
	})

	t.Run("FailureAfterAdvanceKeepsNeither", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 100)
		addConsumer(t, b.db, "together")
		appendN(t, b.log, 10)
		cursors := checkingCursors{check: func(context.Context, pgx.Tx) error { return errors.New("commit refused") }}
		rounds := sync.NewRoundRunner(b.db.Pool, cursors, b.log, postgres.NewJobSink(b.river, nil), &sync.RoundConfig{BatchSize: 100})
		_, err := rounds.Run(context.Background(), &recordingConsumer{name: "together"})
		require.Error(t, err)
		require.Empty(t, jobSeqs(t, b.db, "together"))
		require.Zero(t, cursorOf(t, b.db, "together"))
	})
}

func TestConsumerRoundLockedEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "busy")
	appendN(t, b.log, 5)

	// Another round holds the cursor row.
	holder, err := b.db.Pool.Begin(context.Background())
	require.NoError(t, err)
	defer holder.Rollback(context.Background()) //nolint:errcheck
	_, err = holder.Exec(context.Background(), `SELECT 1 FROM event_consumer_cursors WHERE name = 'busy' FOR UPDATE`)
	require.NoError(t, err)

	// Without SKIP LOCKED the round would wait on the row until this
	// deadline and fail; with it, it reports Locked at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := b.rounds.Run(ctx, &recordingConsumer{name: "busy"})
	require.NoError(t, err)
	require.True(t, res.Locked)
	require.Zero(t, res.Events)
	require.Empty(t, jobSeqs(t, b.db, "busy"))

	// Unknown consumers are not mistaken for locked ones.
	_, err = b.rounds.Run(ctx, &recordingConsumer{name: "nosuch"})
	require.ErrorIs(t, err, sync.ErrUnknownConsumer)

	require.NoError(t, holder.Rollback(context.Background()))
	res, err = b.rounds.Run(ctx, &recordingConsumer{name: "busy"})
	require.NoError(t, err)
	require.False(t, res.Locked)
	require.Equal(t, 5, res.Events)
}

// gauges scrapes reg and returns value[name][consumer].
func gauges(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			consumer := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" {
					consumer = l.GetValue()
				}
			}
			if out[mf.GetName()] == nil {
				out[mf.GetName()] = map[string]float64{}
			}
			out[mf.GetName()][consumer] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

func TestConsumerLagGauges(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "lagging")
	reg := prometheus.NewRegistry()
	reg.MustRegister(postgres.NewLagCollector(b.db.Pool, nil))

	g := gauges(t, reg)
	require.Zero(t, g["bothy_event_consumer_lag"]["lagging"])
	require.Zero(t, g["bothy_event_consumer_pending_age_seconds"]["lagging"], "no pending event: age 0")
	require.Zero(t, g["bothy_event_consumer_last_success_timestamp_seconds"]["lagging"], "no round yet")
	require.Equal(t, 1.0, g["bothy_event_consumer_status_up"][""])

	appendN(t, b.log, 7)
	// Make the oldest pending event ten minutes old.
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE event_log SET committed_at = now() - interval '10 minutes' WHERE seq = 1`)
	require.NoError(t, err)
	g = gauges(t, reg)
	require.Equal(t, 7.0, g["bothy_event_consumer_lag"]["lagging"])
	require.InDelta(t, 600, g["bothy_event_consumer_pending_age_seconds"]["lagging"], 60)
	require.Equal(t, 7.0, g["bothy_event_log_head_seq"][""])
	// The webhooks and push consumers from the migrations are reported too.
	require.Contains(t, g["bothy_event_consumer_lag"], "webhooks")
	require.Contains(t, g["bothy_event_consumer_lag"], "push")

	before := time.Now()
	drain(t, b.rounds, &recordingConsumer{name: "lagging"})
	g = gauges(t, reg)
	require.Zero(t, g["bothy_event_consumer_lag"]["lagging"])
	require.Zero(t, g["bothy_event_consumer_pending_age_seconds"]["lagging"])
	require.GreaterOrEqual(t, g["bothy_event_consumer_last_success_timestamp_seconds"]["lagging"], float64(before.Unix()-1))

	// A database that cannot be read reports status_up 0 and no stale values.
	pool, err := pgxpool.New(context.Background(), b.db.URL)
	require.NoError(t, err)
	broken := prometheus.NewRegistry()
	broken.MustRegister(postgres.NewLagCollector(pool, nil))
	pool.Close()
	g = gauges(t, broken)
	require.Equal(t, 0.0, g["bothy_event_consumer_status_up"][""])
	require.NotContains(t, g, "bothy_event_consumer_lag")
}

func TestRoundCallsHandleLost(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	addConsumer(t, b.db, "behind")
	addConsumer(t, b.db, "partly")
	appendN(t, b.log, 10)
	c := &recordingConsumer{name: "partly"}
	// "partly" reads 1..4 before retention strikes.
	rounds4 := sync.NewRoundRunner(b.db.Pool, postgres.CursorStore{}, b.log, postgres.NewJobSink(b.river, nil), &sync.RoundConfig{BatchSize: 4})
	_, err := rounds4.Run(context.Background(), c)
	require.NoError(t, err)

	dropAllCurrentPartitions(t, b)
	appendN(t, b.log, 3) // 11..13 survive

	for _, tc := range []struct {
		c    *recordingConsumer
		want sync.SeqRange
	}{
		{&recordingConsumer{name: "behind"}, sync.SeqRange{From: 1, To: 10}},
		{c, sync.SeqRange{From: 5, To: 10}},
	} {
		res, err := b.rounds.Run(context.Background(), tc.c)
		require.NoError(t, err)
		require.Equal(t, []sync.SeqRange{tc.want}, tc.c.lost, tc.c.name)
		require.Equal(t, tc.want, res.Lost)
		require.Equal(t, 3, res.Events, "the round continues after the lost range")
		require.Equal(t, int64(13), cursorOf(t, b.db, tc.c.name))
	}
	require.Equal(t, map[int64]int{11: 1, 12: 1, 13: 1}, jobSeqs(t, b.db, "behind"))

	// Nothing is reported twice.
	res, err := b.rounds.Run(context.Background(), c)
	require.NoError(t, err)
	require.Zero(t, res.Lost.Len())
	require.Len(t, c.lost, 1)
}

// dropAllCurrentPartitions runs retention as if a week had passed with a
// one-day retention, then recreates partitions for now.
func dropAllCurrentPartitions(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	parts := postgres.NewPartitions(b.db.Pool, &postgres.PartitionConfig{Interval: 24 * time.Hour, Retention: 24 * time.Hour, Ahead: 1})
	res, err := parts.Maintain(ctx, time.Now().Add(7*24*time.Hour))
	require.NoError(t, err)
	require.NotEmpty(t, res.Dropped)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		_, err := postgres.EnsurePartitions(ctx, tx, time.Now(), 24*time.Hour, 1)
		return err
	}))
}
