package push_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbconn"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/push/pushtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// BenchmarkSendLog_Window measures the window in which a crash loses the
// record of an answer: from the push service accepting a message to the
// start of the insert that records it (push_sends.sent_at), for 200
// devices × 30 events on a worker whose pool of 6 connections is kept busy
// by 20 River workers and 12 goroutines of 4 ms queries. JobsPool writes
// the records through that pool, OwnConnections as the module does. Run:
//
//	go test -run '^$' -bench SendLog_Window -benchtime 1x ./internal/push/
func BenchmarkSendLog_Window(b *testing.B) {
	for _, own := range []bool{false, true} {
		b.Run(map[bool]string{false: "JobsPool", true: "OwnConnections"}[own], func(b *testing.B) {
			for range b.N {
				lat := recordWindow(b, own)
				q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / 1e6 }
				b.ReportMetric(q(0.5), "p50-ms")
				b.ReportMetric(q(0.95), "p95-ms")
				b.ReportMetric(q(0.99), "p99-ms")
				b.ReportMetric(q(1), "max-ms")
			}
		})
	}
}

// recordWindow runs the scenario once and returns the sorted windows.
func recordWindow(b *testing.B, own bool) []time.Duration {
	const devices, events = 200, 30
	db := dbtest.NewDB(b)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(db.URL)
	require.NoError(b, err)
	pc.MaxConns = 6
	dbconn.RegisterTypes(pc)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(b, err)
	defer pool.Close()
	vapid, err := push.GenerateVAPIDKeys()
	require.NoError(b, err)
	var mu gosync.Mutex
	accepted := map[string]time.Time{}
	rcv := pushtest.NewReceiver(&pushtest.ReceiverConfig{OnMessage: func(m pushtest.Message) {
		var p push.Payload
		_ = json.Unmarshal(m.Payload, &p)
		mu.Lock()
		accepted[fmt.Sprintf("%s/%d", m.Device, p.Seq)] = m.At
		mu.Unlock()
	}})
	defer rcv.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dc := &push.DeliverConfig{VAPIDPublicKey: vapid.Public, VAPIDPrivateKey: vapid.Private, TTL: time.Hour, AllowPrivateTargets: true, Logger: logger}
	if own {
		rp := pc.Copy()
		rp.MaxConns = push.RecordConns
		records, err := pgxpool.NewWithConfig(ctx, rp)
		require.NoError(b, err)
		defer records.Close()
		dc.Records = records
	}
	worker, err := push.NewDeliverWorker(pool, dc)
	require.NoError(b, err)
	cc := &push.ConsumerConfig{BatchSize: 20}
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	river.AddWorker(workers, push.NewPageWorker(pool, cc))
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Queues: map[string]river.QueueConfig{push.Queue: {MaxWorkers: 20}},
		Workers: workers, FetchCooldown: time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: logger})
	require.NoError(b, err)
	log := postgres.NewEventLog(pool, nil)
	defer log.Close()
	rounds := sync.NewRoundRunner(pool, postgres.CursorStore{}, log, postgres.NewJobSink(rc, nil), &sync.RoundConfig{Logger: logger})
	names := benchDevices(b, pool, rcv, devices)

	require.NoError(b, rc.Start(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		require.NoError(b, rc.Stop(sctx))
	}()
	noise, stopNoise := context.WithCancel(ctx)
	var wg gosync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for noise.Err() == nil {
				_, _ = pool.Exec(noise, `SELECT pg_sleep(0.004)`)
			}
		})
	}
	defer wg.Wait()
	defer stopNoise()
	consumer := push.NewConsumer(cc)
	for range events {
		_, err := log.Write(ctx, func(ctx context.Context, tx pgx.Tx) ([]sync.NewEvent, error) {
			return []sync.NewEvent{{Space: "s1", Type: "item.created", Actor: "alice", Data: json.RawMessage(`{}`)}}, nil
		})
		require.NoError(b, err)
		_, err = rounds.Run(ctx, consumer)
		require.NoError(b, err)
	}
	testwait.Until(b, 2*time.Minute, func() bool {
		var n int
		require.NoError(b, db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_sends`).Scan(&n))
		return n == devices*events
	}, "not every message was recorded")

	rows, err := db.Pool.Query(ctx, `SELECT registration_id, event_seq, sent_at FROM push_sends`)
	require.NoError(b, err)
	var lat []time.Duration
	var reg uuid.UUID
	var seq int64
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&reg, &seq, &at}, func() error {
		lat = append(lat, at.Sub(accepted[fmt.Sprintf("%s/%d", names[reg], seq)]))
		return nil
	})
	require.NoError(b, err)
	slices.Sort(lat)
	return lat
}

// benchDevices makes alice (the actor) and n readers of space s1 with a
// device each, and returns the devices' names by registration.
func benchDevices(b *testing.B, pool *pgxpool.Pool, rcv *pushtest.Receiver, n int) map[uuid.UUID]string {
	ctx := context.Background()
	registry := push.NewRegistry(&push.RegistryConfig{AllowPrivateTargets: true})
	require.NoError(b, authz.CreatePrincipal(ctx, pool, "alice", authz.KindUser))
	require.NoError(b, authz.Grant(ctx, pool, &authz.GrantParams{Space: "s1", Principal: "alice", Right: authz.RightWrite}))
	names := map[uuid.UUID]string{}
	for i := range n {
		p := fmt.Sprintf("p%d", i)
		require.NoError(b, authz.CreatePrincipal(ctx, pool, p, authz.KindUser))
		require.NoError(b, authz.Grant(ctx, pool, &authz.GrantParams{Space: "s1", Principal: p, Right: authz.RightRead}))
		d, endpoint, err := rcv.AddDevice(p + "-phone")
		require.NoError(b, err)
		var s push.Subscription
		s.Endpoint, s.Keys.P256dh, s.Keys.Auth = endpoint, d.P256dh(), d.Auth()
		r, err := registry.Register(ctx, pool, &push.RegisterParams{Principal: p, Subscription: s})
		require.NoError(b, err)
		names[r.ID] = p + "-phone"
	}
	return names
}
