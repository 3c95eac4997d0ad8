package delivery_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/liveness"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound"
	"github.com/bothy/bothy/services/server/internal/webhooks/outbound/brokertest"
)

// The engine's guarantees through every destination kind (brokertest.Kinds,
// a row each): each test runs a subtest per kind against the machine's
// broker, through the delivery worker, not the destination alone.

// forEachKind runs f in a subtest per destination kind, one after the
// other (each may start a worker process of its own).
func forEachKind(t *testing.T, f func(t *testing.T, k *brokertest.Place)) {
	forKinds(t, func(brokertest.Kind) bool { return true }, f)
}

// forKinds is forEachKind over the kinds keep accepts: a case that means
// nothing for a kind has no subtest there, rather than a skipped one.
func forKinds(t *testing.T, keep func(brokertest.Kind) bool, f func(t *testing.T, k *brokertest.Place)) {
	for _, kind := range brokertest.Kinds {
		if keep(kind) {
			t.Run(kind.Name, func(t *testing.T) { f(t, kind.New(t)) })
		}
	}
}

// firstSeqs is the seqs of as in order of their first arrival, and how
// many arrivals repeated an earlier one.
func firstSeqs(as []brokertest.Arrival) (order []int64, repeats int) {
	seen := map[string]bool{}
	for _, a := range as {
		if seen[a.ID()] {
			repeats++
			continue
		}
		seen[a.ID()] = true
		order = append(order, a.Seq())
	}
	return order, repeats
}

// The mid-drain kill through a broker: one ordered subscription sent
// brokerKillEvents events, one batch, by a worker process SIGKILLed once
// brokerKillAfter of them arrived; a proxy makes each of the broker's
// answers take brokerLatency, so the drain lasts seconds and the window
// of repeats allowed (RecordEvery and killSlack before the kill) holds
// fewer messages than arrived before the kill: sending the batch again
// from its start exceeds it.
const (
	brokerKillEvents = 100
	brokerKillAfter  = 60
	brokerLatency    = 40 * time.Millisecond
)

// TestBrokers_WorkerKilledMidDrainArrivesInOrder: a worker process
// draining a subscription to each kind is SIGKILLed mid-drain and another
// process takes over. Every event arrives, first arrivals in seq order.
// A broker that drops repeats (JetStream by Nats-Msg-Id, Redis by entry
// id) holds each message once; on the others the repeats are counted and
// bounded as over HTTP: the request in flight and those answered within
// RecordEvery (and killSlack) before the kill.
func TestBrokers_WorkerKilledMidDrainArrivesInOrder(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, k *brokertest.Place) {
		r := killMidDrain(t, k)
		if k.DropsRepeats {
			t.Logf("%d sent again after the kill, dropped by the broker", r.dropped)
			require.Positive(t, r.dropped, "the live process sends again what the killed one had not recorded")
			require.Zero(t, r.repeats, "the broker drops what the live process sends again")
			return
		}
		t.Logf("%d repeats after the kill, %d arrived within %s before it", r.repeats, r.answeredLate, r.window)
		require.LessOrEqual(t, r.repeats, 1+r.answeredLate, "sent again only the message in flight and those answered within the window")
	})
}

// TestBrokers_KillRepeatBoundFailsWithoutMidBatchRecording: the bound of
// TestBrokers_WorkerKilledMidDrainArrivesInOrder is exceeded when the
// killed process's recorder does not record its answers during the batch
// (RecordEvery an hour): the live process sends the batch again from its
// start. Only on the kinds that count repeats: the others drop them.
func TestBrokers_KillRepeatBoundFailsWithoutMidBatchRecording(t *testing.T) {
	t.Parallel()
	// Only the kinds that count repeats: the others drop them, and none
	// arrives to count.
	forKinds(t, func(k brokertest.Kind) bool { return !k.DropsRepeats }, func(t *testing.T, k *brokertest.Place) {
		r := killMidDrain(t, k, workerRecordEveryEnv+"=1h")
		t.Logf("%d repeats after the kill, %d arrived within %s before it", r.repeats, r.answeredLate, r.window)
		require.Greater(t, r.repeats, 1+r.answeredLate, "without the recorder the batch is sent again from its start")
	})
}

// killed is what a kill mid-drain left at the destination.
type killed struct {
	// repeats arrived again; dropped are the sends the broker answered
	// as a repeat it dropped.
	repeats, dropped int
	// answeredLate arrived first within window before the kill.
	answeredLate int
	window       time.Duration
}

// killMidDrain: a worker process (with env added to its environment)
// drains brokerKillEvents events of an ordered subscription to k and is
// SIGKILLed once brokerKillAfter arrived; a process of this binary takes
// over. Every event must arrive, first arrivals in seq order; it returns
// the repeats.
func killMidDrain(t *testing.T, k *brokertest.Place, env ...string) killed {
	t.Helper()
	cfg := killConfig()
	b := setup(t, cfg)
	proxy := brokertest.NewSlowProxy(t, k.Addr, brokerLatency)
	s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: k.Destination(proxy.Addr())})
	child := startWorkerChild(t, b.db.URL, env...)
	evs := b.emit(t, "s1", brokerKillEvents)
	b.round(t)

	testwait.Until(t, time.Minute, func() bool {
		order, _ := firstSeqs(k.Arrivals(t))
		return len(order) >= brokerKillAfter
	}, "%d events arrived", brokerKillAfter)
	killedAt := child.kill(t)
	order, _ := firstSeqs(k.Arrivals(t))
	require.Less(t, len(order), brokerKillEvents, "killed mid-drain")
	testwait.Until(t, 10*time.Second, func() bool {
		hs, err := liveness.Holders(context.Background(), b.db.Pool)
		require.NoError(t, err)
		return !slices.ContainsFunc(hs, func(s liveness.Session) bool { return uint32(s.PID) == child.session })
	}, "the killed process's session ends")

	liveProcess(t, b, cfg, 10)
	evs = append(evs, b.emit(t, "s1", 1)...)
	b.round(t) // a new job, which the live process runs
	testwait.Until(t, time.Minute, func() bool {
		order, _ := firstSeqs(k.Arrivals(t))
		return len(order) == len(evs)
	}, "the live process delivers the rest")

	got := k.Arrivals(t)
	order, repeats := firstSeqs(got)
	require.Equal(t, seqs(evs...), order, "every event arrives, first arrivals in seq order")
	r := killed{repeats: repeats, dropped: droppedRepeats(t, b, s.ID), window: cfg.RecordEvery + killSlack}
	seen := map[string]bool{}
	for _, a := range got {
		if !seen[a.ID()] && a.At.Before(killedAt) && killedAt.Sub(a.At) <= r.window {
			r.answeredLate++
		}
		seen[a.ID()] = true
	}
	return r
}

// workerRecordEveryEnv, set in a worker process's environment, replaces
// its RecordEvery (a duration).
const workerRecordEveryEnv = "BOTHY_TEST_WEBHOOK_WORKER_RECORD_EVERY"

// childRecordEvery sets cfg.RecordEvery from workerRecordEveryEnv when it
// is set.
func childRecordEvery(cfg *delivery.DeliverConfig) error {
	v := os.Getenv(workerRecordEveryEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	cfg.RecordEvery = d
	return nil
}

// droppedRepeats is how many of the subscription's sends the broker
// answered as a repeat it dropped.
func droppedRepeats(t *testing.T, b *bundle, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM webhook_attempts WHERE subscription_id = $1 AND response_excerpt LIKE '%a repeat%'`, id).Scan(&n))
	return n
}

// liveProcess is a worker process for webhooks in this test binary: a
// liveness lock and a River client running a deliverer, whose broker
// connections close when the test ends.
func liveProcess(t *testing.T, b *bundle, cfg *delivery.DeliverConfig, slots int) {
	t.Helper()
	h, err := liveness.NewHolder(&liveness.HolderConfig{ConnString: b.db.URL, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, h.Acquire(context.Background()))
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	c := *cfg
	c.Senders = slots
	del, err := delivery.NewDeliverer(b.db.Pool, postgres.NewEventLog(b.db.Pool, nil), nil, &c)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = del.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done }) // after River stopped: the deliverer's connections close
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
}

// The revoke mid-drain: revokeEvents events, the owner's right revoked
// once revokeAfter arrived; each of the broker's answers takes
// revokeLatency, so one batch of sends lasts longer than the bound.
const (
	revokeEvents  = 300
	revokeAfter   = 30
	revokeLatency = 3 * time.Millisecond
	revokeBound   = 100 * time.Millisecond
)

// TestBrokers_RevokeStopsSendsWithinTheBound: the owner's right is
// revoked while a backlog drains to each kind. No send may start later
// than webhooks.rights_max_age after the revoke returned (each attempt's
// start, attempted_at, is taken right before the send); the rest of the
// backlog is dead without a send, and the broker holds exactly what was
// sent.
func TestBrokers_RevokeStopsSendsWithinTheBound(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, k *brokertest.Place) {
		r := revokeMidDrain(t, k, revokeBound)
		t.Logf("%d sent, the last %s after the revoke returned; %d refused without a send", r.sent, r.lastAfter, r.refused)
		require.Zero(t, r.late, "sends started more than %s after the revoke", revokeBound)
		require.Positive(t, r.refused, "the rest of the backlog is dead without a send")
		require.Equal(t, revokeEvents, r.sent+r.refused)
		require.Equal(t, r.sent, r.arrived, "the broker holds what was sent")
	})
}

// TestBrokers_RevokeBoundFailsWithAStaleRightsDecision: the check of
// TestBrokers_RevokeStopsSendsWithinTheBound finds late sends in an engine
// that decides rights again only after a minute (rights_max_age): the
// sends of the batch in progress go on past the bound. No test hook skips
// the rights check; its age is the mechanism under test.
func TestBrokers_RevokeBoundFailsWithAStaleRightsDecision(t *testing.T) {
	t.Parallel()
	var late atomic.Int64
	t.Run("kinds", func(t *testing.T) {
		forEachKind(t, func(t *testing.T, k *brokertest.Place) {
			r := revokeMidDrain(t, k, time.Minute)
			t.Logf("%d sent, %d of them more than %s after the revoke", r.sent, r.late, revokeBound)
			late.Add(int64(r.late))
		})
	})
	// Over all kinds: a kind whose drain ended before the revoke shows
	// nothing either way.
	require.Positive(t, late.Load(), "a stale decision lets sends start past the bound")
}

// revoked is what a revoke mid-drain left on record.
type revoked struct {
	sent, refused, late, arrived int
	lastAfter                    time.Duration
}

// revokeMidDrain drains revokeEvents events to k through an engine whose
// rights decisions live maxAge, revokes the owner's right mid-drain and
// returns the attempts on record: sends, refusals (dead without a send),
// sends that started more than revokeBound after the revoke returned, and
// the distinct messages that arrived.
func revokeMidDrain(t *testing.T, k *brokertest.Place, maxAge time.Duration) revoked {
	t.Helper()
	cfg := fastRetries()
	cfg.RightsMaxAge = maxAge
	b := setup(t, cfg)
	proxy := brokertest.NewSlowProxy(t, k.Addr, revokeLatency)
	s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: k.Destination(proxy.Addr())})
	b.emit(t, "s1", revokeEvents)
	b.round(t)
	b.start(t)

	testwait.Until(t, 30*time.Second, func() bool {
		order, _ := firstSeqs(k.Arrivals(t))
		return len(order) >= revokeAfter
	}, "%d arrived, mid-batch", revokeAfter)
	ctx := context.Background()
	require.NoError(t, authz.Revoke(ctx, b.db.Pool, "s1", "alice"))
	at := time.Now() // after the commit
	testwait.Until(t, time.Minute, func() bool { return b.pending(t, s.ID) == 0 }, "the backlog ended")

	var r revoked
	var last time.Time
	require.NoError(t, b.db.Pool.QueryRow(ctx, `
SELECT max(attempted_at) FILTER (WHERE NOT refused), count(*) FILTER (WHERE NOT refused), count(*) FILTER (WHERE refused),
       count(*) FILTER (WHERE NOT refused AND attempted_at > $2)
FROM (SELECT attempted_at, coalesce(error, '') LIKE 'not allowed%' AS refused FROM webhook_attempts WHERE subscription_id = $1) a`,
		s.ID, at.Add(revokeBound)).Scan(&last, &r.sent, &r.refused, &r.late))
	r.lastAfter = last.Sub(at)
	order, _ := firstSeqs(k.Arrivals(t))
	r.arrived = len(order)
	return r
}

// TestBrokers_DeadAfterTheRetryBudget: a subscription whose destination
// keeps refusing (RabbitMQ: an exchange with no queue; JetStream: no
// stream; Redis: a key of another type; MQTT, which refuses no publish:
// a broker that closes every connection; HTTP: nothing listening) retries
// by its policy's schedule, and each delivery is dead after the retry
// budget, every attempt recorded with the broker's reason; under
// ordered_dead_letter the next delivery goes on and the subscription
// stays active.
func TestBrokers_DeadAfterTheRetryBudget(t *testing.T) {
	t.Parallel()
	forEachKind(t, func(t *testing.T, k *brokertest.Place) {
		b := setup(t, slowDefaults())
		s, _ := b.subscribe(t, &webhooks.CreateParams{Destination: k.Refusing,
			Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyOrderedDeadLetter)}, time.Second)})
		evs := b.emit(t, "s1", 2)
		b.start(t)
		b.round(t)
		for _, e := range evs {
			testwait.Until(t, 30*time.Second, func() bool { return b.deliveryStatus(t, s.ID, e.Seq) == webhooks.DeliveryDead },
				"delivery %d dead", e.Seq)
		}
		ctx := context.Background()
		dead, err := webhooks.Deliveries(ctx, b.db.Pool, &webhooks.DeliveriesParams{SubscriptionID: s.ID, Status: webhooks.DeliveryDead})
		require.NoError(t, err)
		require.Len(t, dead, 2)
		t.Logf("dead after %d attempts: %s", dead[0].Attempts, dead[0].LastError)
		for _, d := range dead {
			require.Contains(t, d.LastError, "retry budget")
			require.GreaterOrEqual(t, d.Attempts, 2, "retried within the budget")
			atts, err := webhooks.Attempts(ctx, b.db.Pool, s.ID, d.Seq)
			require.NoError(t, err)
			for _, a := range atts {
				require.Contains(t, a.Error, k.RefusalReason, "delivery %d", d.Seq)
				require.Nil(t, a.StatusCode)
			}
		}
		require.Equal(t, webhooks.StatusActive, b.sub(t, s.ID).Status, "the subscription goes on")
		b.waitCounter(t, "dead", 2)
	})
}

// TestBrokers_Resend: a delivery resent through the store is sent again
// under its event's id, signed. A delivered one is recorded delivered a
// second time and arrives again on every kind: a broker that drops
// repeats (JetStream by Nats-Msg-Id, Redis by entry id) takes a resend
// for a new message, not for a repeat of the first sending. A resend whose
// answer was lost is attempted again, and a broker that drops repeats
// holds it once. A dead one, its destination repaired, arrives.
func TestBrokers_Resend(t *testing.T) {
	t.Parallel()
	t.Run("Delivered", func(t *testing.T) {
		t.Parallel()
		forEachKind(t, func(t *testing.T, k *brokertest.Place) {
			b := setup(t, nil)
			s, secret := b.subscribe(t, &webhooks.CreateParams{Destination: k.Destination(k.Addr)})
			b.start(t)
			evs := b.emit(t, "s1", 2)
			b.round(t)
			b.waitDelivered(t, s.ID, seqs(evs...)...)

			_, err := b.resend(s.ID, evs[0].Seq)
			require.NoError(t, err)
			testwait.Until(t, 20*time.Second, func() bool { return attemptsOf(t, b, s.ID, evs[0].Seq) == 2 }, "the resend attempted")
			b.waitDelivered(t, s.ID, evs[0].Seq)
			later := b.emit(t, "s1", 1)
			b.round(t)
			b.waitDelivered(t, s.ID, later[0].Seq)

			requireArrivals(t, k, secret, []uuid.UUID{evs[0].ID, evs[1].ID, evs[0].ID, later[0].ID})
			require.Zero(t, droppedRepeats(t, b, s.ID), "the resend is no repeat")
		})
	})
	t.Run("AnswerLostRepeatDropped", func(t *testing.T) {
		t.Parallel()
		// Only the kinds whose broker drops a repeat (a repeat arrives again
		// elsewhere, resent or not), and not Redis: its send reads the
		// stream before it adds, so the proxy would cut the read's answer;
		// package redisstream shows a resend's repeat dropped.
		keep := func(k brokertest.Kind) bool { return k.DropsRepeats && k.Name != "RedisStream" }
		forKinds(t, keep, func(t *testing.T, k *brokertest.Place) {
			proxy := brokertest.NewProxy(t, k.Addr)
			b := setup(t, nil)
			s, secret := b.subscribe(t, &webhooks.CreateParams{Destination: k.Destination(proxy.Addr())})
			b.start(t)
			evs := b.emit(t, "s1", 2)
			b.round(t)
			b.waitDelivered(t, s.ID, seqs(evs...)...)

			proxy.CutOnReply() // the resend reaches the broker, its answer is lost
			_, err := b.resend(s.ID, evs[0].Seq)
			require.NoError(t, err)
			select {
			case <-proxy.Cuts():
			case <-time.After(20 * time.Second):
				t.Fatal("the resend's answer was not cut")
			}
			proxy.Restore()
			testwait.Until(t, 20*time.Second, func() bool { return attemptsOf(t, b, s.ID, evs[0].Seq) >= 3 }, "the resend attempted again")
			b.waitDelivered(t, s.ID, evs[0].Seq)
			later := b.emit(t, "s1", 1)
			b.round(t)
			b.waitDelivered(t, s.ID, later[0].Seq)

			requireArrivals(t, k, secret, []uuid.UUID{evs[0].ID, evs[1].ID, evs[0].ID, later[0].ID})
			require.Equal(t, 1, droppedRepeats(t, b, s.ID), "the resend's repeat is answered as a dropped repeat")
		})
	})
	t.Run("Dead", func(t *testing.T) {
		t.Parallel()
		forEachKind(t, func(t *testing.T, k *brokertest.Place) {
			b := setup(t, slowDefaults())
			s, secret := b.subscribe(t, &webhooks.CreateParams{Destination: k.Refusing,
				Policy: quickSchedule(&webhooks.PolicyParams{Name: new(webhooks.PolicyOrderedDeadLetter)}, time.Second)})
			b.start(t)
			evs := b.emit(t, "s1", 1)
			b.round(t)
			testwait.Until(t, 30*time.Second, func() bool { return b.deliveryStatus(t, s.ID, evs[0].Seq) == webhooks.DeliveryDead }, "dead")

			_, err := webhooks.Update(context.Background(), b.db.Pool, s.ID,
				&webhooks.UpdateParams{Destination: k.Destination(k.Addr), AllowPrivateTargets: true})
			require.NoError(t, err)
			_, err = b.resend(s.ID, evs[0].Seq)
			require.NoError(t, err)
			b.waitDelivered(t, s.ID, evs[0].Seq)
			requireArrivals(t, k, secret, []uuid.UUID{evs[0].ID})
		})
	})
}

// attemptsOf is how many attempts the delivery of seq has.
func attemptsOf(t *testing.T, b *bundle, id uuid.UUID, seq int64) int {
	atts, err := webhooks.Attempts(context.Background(), b.db.Pool, id, seq)
	require.NoError(t, err)
	return len(atts)
}

// requireArrivals waits until as many messages as want arrived at k and
// requires them to be want's events, in order, each signed with secret.
func requireArrivals(t *testing.T, k *brokertest.Place, secret string, want []uuid.UUID) {
	t.Helper()
	var got []brokertest.Arrival
	testwait.Until(t, 20*time.Second, func() bool {
		got = k.Arrivals(t)
		return len(got) >= len(want)
	}, "%d messages arrived", len(want))
	ids := make([]string, len(got))
	target := &outbound.Target{Secret: secret}
	for i, a := range got {
		ids[i] = a.ID()
		require.NoError(t, brokertest.Verify(target, a.Headers, a.Body), "message %d", i)
		var env struct {
			ID string `json:"id"`
		}
		require.NoError(t, json.Unmarshal(a.Body, &env))
		require.Equal(t, env.ID, a.ID(), "signed under the event's id")
	}
	wantIDs := make([]string, len(want))
	for i, id := range want {
		wantIDs[i] = id.String()
	}
	require.Equal(t, wantIDs, ids)
}
