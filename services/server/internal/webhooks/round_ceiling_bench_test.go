package webhooks_test

import (
	"context"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// Sizes of BenchmarkRoundCeiling's log: ceilingEvents events spread
// round-robin over ceilingSpaces spaces, written before any round runs.
const (
	ceilingSpaces = 16
	ceilingEvents = 50_000
)

// BenchmarkRoundCeiling measures how many events per second one consumer's
// rounds move from the log into deliveries and jobs when the rounds are the
// only work: the log is filled first, nothing sends, and the clock runs from
// the first round of an iteration until the consumer has read the whole log.
// Rounds are the server's (asynchronous commit, COPY into River, batches of
// 1000).
//
// consumer=webhooks has one subscription on every space, so it records one
// delivery per event and a job per subscription and round; consumer=push
// has one device per space, so it finds one receiver per event and makes a
// push.deliver job per round and batch of devices.
//
// consumer=both runs the two consumers' rounds at the same time, as a worker
// does; its events/s counts each event once per consumer.
//
// Two partitions are the cheapest form of partitioning a consumer by
// space: two cursors, whose rounds run at the same time on two goroutines,
// each reading the whole log and handling only the events of its half of
// the spaces. Real partitions would read only their own events, so this
// form overstates the reading; p1-read-% says by how much.
//
// Each iteration drains the log once with one partition and once with two,
// in turns first, as the machine is noisy: p1-events/s and p2-events/s are
// the two rates and p2/p1 their ratio. The p1-*-% metrics split the summed
// time of the one-partition rounds into reading the events (read), the
// consumer's own statement (handle), River's COPY (insert) and the rest:
// begin, cursor lock and advance, commit (other).
//
//	go test ./services/server/internal/webhooks -run '^$' -bench BenchmarkRoundCeiling -benchtime 3x
func BenchmarkRoundCeiling(b *testing.B) {
	bn := setupConns(b, nil, 8)
	fillCeilingLog(b, bn)
	for _, consumer := range []string{"webhooks", "push", "both"} {
		b.Run("consumer="+consumer, func(b *testing.B) { benchRoundCeiling(b, bn, consumer) })
	}
}

// fillCeilingLog makes the receivers of both consumers on every space and
// writes the log.
func fillCeilingLog(b *testing.B, bn *bundle) {
	ctx := context.Background()
	for i := range ceilingSpaces {
		space, user := fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i)
		require.NoError(b, authz.CreatePrincipal(ctx, bn.db.Pool, user, authz.KindUser))
		require.NoError(b, authz.Grant(ctx, bn.db.Pool, &authz.GrantParams{Space: space, Principal: user, Right: authz.RightRead}))
		_, err := bn.db.Pool.Exec(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, event_types)
VALUES (gen_random_uuid(), 'alice', $1, 'http://127.0.0.1:9/x', 'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', ARRAY['item.created']);
`, space)
		require.NoError(b, err)
		_, err = bn.db.Pool.Exec(ctx, `
INSERT INTO push_registrations (id, principal, endpoint, p256dh, auth)
VALUES (gen_random_uuid(), $1, 'https://push.example/' || $1, 'key', 'auth')`, user)
		require.NoError(b, err)
	}
	for done := 0; done < ceilingEvents; done += 5000 {
		_, err := bn.log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) {
			evs := make([]sync.NewEvent, 5000)
			for i := range evs {
				evs[i] = sync.NewEvent{Space: fmt.Sprintf("s%d", (done+i)%ceilingSpaces), Type: "item.created", Actor: "bob",
					Data: []byte(fmt.Sprintf(`{"i":%d}`, done+i))}
			}
			return evs, nil
		})
		require.NoError(b, err)
	}
	_, err := bn.db.Pool.Exec(ctx, `ANALYZE`)
	require.NoError(b, err)
}

func benchRoundCeiling(b *testing.B, bn *bundle, consumer string) {
	ctx := context.Background()
	var head int64
	require.NoError(b, bn.db.Pool.QueryRow(ctx, `SELECT last_seq FROM event_seq`).Scan(&head))
	// An insert-only River client: nothing runs the jobs, so it knows no kinds.
	rc, err := river.NewClient(riverpgxv5.New(bn.db.Pool), &river.Config{Logger: quiet})
	require.NoError(b, err)
	sink := postgres.NewJobSink(rc, &postgres.JobSinkConfig{Fast: true})

	var times [3]roundTimes // by partitions: 1 and 2
	var elapsed [3]time.Duration
	b.ResetTimer()
	for i := range b.N {
		order := []int{1, 2}
		if i%2 == 1 {
			order = []int{2, 1}
		}
		for _, parts := range order {
			elapsed[parts] += drainCeiling(b, bn, sink, consumer, parts, head, &times[parts])
		}
	}
	b.StopTimer()
	perConsumer := float64(b.N * int(head) * len(ceilingConsumers(bn, consumer)))
	rate1, rate2 := perConsumer/elapsed[1].Seconds(), perConsumer/elapsed[2].Seconds()
	b.ReportMetric(rate1, "p1-events/s")
	b.ReportMetric(rate2, "p2-events/s")
	b.ReportMetric(rate2/rate1, "p2/p1")
	t := &times[1]
	total := float64(t.round.Load())
	other := total - float64(t.read.Load()+t.handle.Load()+t.insert.Load())
	b.ReportMetric(100*float64(t.read.Load())/total, "p1-read-%")
	b.ReportMetric(100*float64(t.handle.Load())/total, "p1-handle-%")
	b.ReportMetric(100*float64(t.insert.Load())/total, "p1-insert-%")
	b.ReportMetric(100*other/total, "p1-other-%")
}

// drainCeiling resets the rounds' work and runs the consumer, in parts
// partitions at once, until each partition has read the whole log. It
// returns the time that took, summing the rounds' parts into t.
func drainCeiling(b *testing.B, bn *bundle, sink sync.JobSink, consumer string, parts int, head int64, t *roundTimes) time.Duration {
	ctx := context.Background()
	rounds := sync.NewRoundRunner(postgres.RoundTx{Pool: bn.db.Pool}, postgres.CursorStore{}, &timedSource{EventLog: bn.log, t: t},
		&timedSink{sink: sink, t: t}, &sync.RoundConfig{BatchSize: 1000, Logger: quiet})
	var consumers []sync.Consumer
	for _, inner := range ceilingConsumers(bn, consumer) {
		for p := range parts {
			consumers = append(consumers, &partConsumer{inner: inner, name: fmt.Sprintf("bench_%s_p%d", inner.Name(), p), part: p, parts: parts, t: t})
		}
	}
	b.StopTimer()
	resetCeiling(b, bn, consumers)
	b.StartTimer()
	start := time.Now()
	var wg gosync.WaitGroup
	for _, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				res, err := rounds.Run(ctx, c)
				t.round.Add(int64(time.Since(t0)))
				if err != nil {
					b.Error(err)
					return
				}
				if res.To >= head {
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// ceilingConsumers returns the consumers a variant runs.
func ceilingConsumers(bn *bundle, name string) []sync.Consumer {
	switch name {
	case "webhooks":
		return []sync.Consumer{bn.consumer}
	case "push":
		return []sync.Consumer{push.NewConsumer(nil)}
	default:
		return []sync.Consumer{bn.consumer, push.NewConsumer(nil)}
	}
}

// resetCeiling empties what the rounds made, vacuums it away so every
// iteration starts from the same tables, and puts the cursors back to the
// start of the log.
func resetCeiling(b *testing.B, bn *bundle, consumers []sync.Consumer) {
	ctx := context.Background()
	_, err := bn.db.Pool.Exec(ctx, `DELETE FROM webhook_deliveries; DELETE FROM river_job`)
	require.NoError(b, err)
	for _, stmt := range []string{`VACUUM ANALYZE webhook_deliveries`, `VACUUM ANALYZE river_job`} {
		_, err := bn.db.Pool.Exec(ctx, stmt)
		require.NoError(b, err)
	}
	for _, c := range consumers {
		_, err := bn.db.Pool.Exec(ctx, `
INSERT INTO event_consumer_cursors (name, last_seq) VALUES ($1, 0)
ON CONFLICT (name) DO UPDATE SET last_seq = 0`, c.Name())
		require.NoError(b, err)
	}
}

// roundTimes sums where the rounds' time went.
type roundTimes struct {
	round, read, handle, insert atomic.Int64
}

// timedSource is the event log, timing its reads.
type timedSource struct {
	*postgres.EventLog
	t *roundTimes
}

func (s *timedSource) EventsAfter(ctx context.Context, tx pgx.Tx, p *sync.EventsAfterParams) ([]sync.Event, error) {
	t0 := time.Now()
	defer func() { s.t.read.Add(int64(time.Since(t0))) }()
	return s.EventLog.EventsAfter(ctx, tx, p)
}

// timedSink is River's COPY, timed.
type timedSink struct {
	sink sync.JobSink
	t    *roundTimes
}

func (s *timedSink) InsertJobs(ctx context.Context, tx pgx.Tx, jobs []sync.Job) (int, error) {
	t0 := time.Now()
	defer func() { s.t.insert.Add(int64(time.Since(t0))) }()
	return s.sink.InsertJobs(ctx, tx, jobs)
}

// partConsumer is a consumer's partition part of parts under its own cursor
// name: it hands the inner consumer only the events of its spaces (space
// sN belongs to partition N mod parts), and times it.
type partConsumer struct {
	inner       sync.Consumer
	name        string
	part, parts int
	t           *roundTimes
}

func (c *partConsumer) Name() string { return c.name }

func (c *partConsumer) Handle(ctx context.Context, tx pgx.Tx, events []sync.Event) ([]sync.Job, error) {
	mine := events
	if c.parts > 1 {
		mine = make([]sync.Event, 0, len(events)/c.parts+1)
		for i := range events {
			var n int
			if _, err := fmt.Sscanf(events[i].Space, "s%d", &n); err == nil && n%c.parts == c.part {
				mine = append(mine, events[i])
			}
		}
	}
	if len(mine) == 0 {
		return nil, nil
	}
	t0 := time.Now()
	defer func() { c.t.handle.Add(int64(time.Since(t0))) }()
	return c.inner.Handle(ctx, tx, mine)
}
