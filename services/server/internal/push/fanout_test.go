package push_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	gosync "sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/push"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// countingDeliverer stands in for the push.deliver worker: it counts the
// messages its jobs carry per (registration, seq). Sending 100,000 devices
// encrypted messages would take this machine minutes; what is under test is
// that each message is in exactly one job, which the real worker then
// sends once (the other push tests).
type countingDeliverer struct {
	river.WorkerDefaults[push.DeliverArgs]
	mu   gosync.Mutex
	seen map[message]int
	jobs int
}

type message struct {
	reg uuid.UUID
	seq int64
}

func (c *countingDeliverer) Work(_ context.Context, job *river.Job[push.DeliverArgs]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.jobs++
	for _, e := range job.Args.Events {
		for _, d := range e.Devices {
			c.seen[message{d.RegistrationID, e.Seq}]++
		}
	}
	return nil
}

func (c *countingDeliverer) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.seen {
		n += k
	}
	return n
}

// fanoutSpaceSQL makes space s1 of members p000001.. with four devices
// each at three push services, inserted as a set: registering that many
// devices through the registry would take minutes. Besides them, the
// actor alice, a member who muted s1 and a disabled member have devices
// there too; none of those may get a message.
const fanoutSpaceSQL = `
INSERT INTO principals (id, kind) SELECT 'p' || lpad(g::text, 6, '0'), 'user' FROM generate_series(1, %d) g;
INSERT INTO principals (id, kind) VALUES ('alice', 'user'), ('muted', 'user'), ('gone', 'user');
UPDATE principals SET disabled_at = now() WHERE id = 'gone';
INSERT INTO space_members (space, principal, "right") SELECT 's1', id, 'read' FROM principals;
UPDATE space_members SET "right" = 'write' WHERE principal = 'alice';
INSERT INTO push_preferences (principal, space, notify) VALUES ('muted', 's1', false);
INSERT INTO push_registrations (id, principal, endpoint, p256dh, auth)
SELECT gen_random_uuid(), p.id, 'https://push' || (d %% 3) || '.invalid/push/' || p.id || '-' || d, 'k', 'a'
FROM principals p, generate_series(1, 4) d`

// TestPushRound_LargeFanOutKeepsAdvancing: a burst of events in a space of
// 100,000 devices. Rounds stay small (the space's events go into page
// jobs, which walk its devices a page at a time), so none times out, the
// cursor reaches the head, and every device is in exactly one delivery job
// per event. With the round reading every receiver of the burst, each round
// runs past its timeout and is rolled back: the cursor never moves.
func TestPushRound_LargeFanOutKeepsAdvancing(t *testing.T) {
	t.Parallel()
	const members, events = 25_000, 4
	ctx := context.Background()
	db := dbtest.NewDB(t)
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(fanoutSpaceSQL, members))
	require.NoError(t, err)
	var devices int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_registrations WHERE principal LIKE 'p%'`).Scan(&devices))
	require.Equal(t, 4*members, devices)

	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cc := &push.ConsumerConfig{BatchSize: 2000, PageEvents: 3}
	counter := &countingDeliverer{seen: map[message]int{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, counter)
	river.AddWorker(workers, push.NewPageWorker(db.Pool, cc))
	rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{
		Queues: map[string]river.QueueConfig{push.Queue: {MaxWorkers: 10}}, Workers: workers,
		FetchCooldown: time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(ctx))
	t.Cleanup(func() {
		stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rc.Stop(stop))
	})

	log := postgres.NewEventLog(db.Pool, nil)
	t.Cleanup(log.Close)
	burst := make([]sync.NewEvent, events)
	for i := range burst {
		burst[i] = sync.NewEvent{Space: "s1", Type: "item.created", Actor: "alice"}
	}
	written, err := log.Write(ctx, func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return burst, nil })
	require.NoError(t, err)
	head := written[len(written)-1].Seq

	timeout := oneEventRead(t, db)
	var mu gosync.Mutex
	var failed []error

	rounds := postgres.NewRoundRunner(db.Pool, log, rc, &sync.RoundConfig{Logger: logger})
	w, err := sync.NewWorker(rounds, []sync.Consumer{push.NewConsumer(cc)}, &sync.WorkerConfig{
		PollInterval: 50 * time.Millisecond, RoundTimeout: timeout, Logger: logger,
		AfterRound: func(_ string, _ sync.RoundResult, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() { stop(); require.NoError(t, <-done) })

	cursor := func() int64 {
		var seq int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT last_seq FROM event_consumer_cursors WHERE name = 'push'`).Scan(&seq))
		return seq
	}
	for deadline := time.Now().Add(120 * time.Second); cursor() != head || counter.total() < devices*events; {
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("after 2m: cursor %d of %d, %d of %d messages in delivery jobs, %d rounds failed (the last: %v)",
				cursor(), head, counter.total(), devices*events, len(failed), failed[len(failed)-1:])
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	testwait.Until(t, 30*time.Second, func() bool {
		var open int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed')`).Scan(&open))
		return open == 0
	}, "every page and delivery job completed")

	mu.Lock()
	require.Empty(t, failed, "no round failed (none ran past its timeout)")
	mu.Unlock()
	counter.mu.Lock()
	defer counter.mu.Unlock()
	require.Len(t, counter.seen, devices*events, "every device, every event; nobody else")
	for m, n := range counter.seen {
		require.Equal(t, 1, n, "registration %s, seq %d", m.reg, m.seq)
	}
	regs := registrations(counter.seen)
	require.Len(t, regs, devices)
	var ofMembers int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM push_registrations WHERE id = ANY($1) AND principal LIKE 'p%'`,
		regs).Scan(&ofMembers))
	require.Equal(t, devices, ofMembers, "no message for the actor, a member who muted the space or a disabled one")
	var pages int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'push.page'`).Scan(&pages))
	t.Logf("%d page jobs, %d delivery jobs for %d messages", pages, counter.jobs, devices*events)
}

// allReceiversSQL reads every receiving device of s1 at once, as a round
// without paging would for each event.
const allReceiversSQL = `
SELECT split_part(r.endpoint, '/', 1) || '//' || split_part(r.endpoint, '/', 3), r.id, r.principal
FROM space_members m
JOIN principals p ON p.id = m.principal AND p.disabled_at IS NULL
JOIN push_registrations r ON r.principal = m.principal
WHERE m.space = 's1' AND m."right" >= 'read' AND m.principal <> 'alice'
  AND NOT EXISTS (SELECT 1 FROM push_preferences pp WHERE pp.principal = m.principal AND pp.space = 's1' AND NOT pp.notify)
ORDER BY 1, 2`

// oneEventRead is the round timeout of the test: the least of three
// reads of one event's receivers (allReceiversSQL). One event's fan-out is
// then too large for a round on whatever machine runs the test, since a
// round without paging would also have to make and insert its jobs.
func oneEventRead(t *testing.T, db *dbtest.DB) time.Duration {
	t.Helper()
	best := time.Hour
	for range 3 {
		start := time.Now()
		rows, err := db.Pool.Query(context.Background(), allReceiversSQL)
		require.NoError(t, err)
		n := 0
		for rows.Next() {
			n++
		}
		require.NoError(t, rows.Err())
		require.Positive(t, n)
		best = min(best, time.Since(start))
	}
	t.Logf("round timeout: %s, the fastest of three reads of one event's receivers", best)
	return best
}

// registrations lists the distinct registrations of seen.
func registrations(seen map[message]int) [][16]byte {
	set := map[uuid.UUID]bool{}
	for m := range seen {
		set[m.reg] = true
	}
	out := make([][16]byte, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	return out
}
