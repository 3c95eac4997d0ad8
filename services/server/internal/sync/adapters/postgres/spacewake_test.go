package postgres_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// wakeBundle is a SpaceWaker on a real log: notify appends with a NOTIFY,
// quiet ones without (a lost notification).
type wakeBundle struct {
	db            *dbtest.DB
	notify, quiet *postgres.EventLog
	bc            *sync.SpaceBroadcast
	waker         *sync.SpaceWaker
	reg           *prometheus.Registry
}

// setupWaker runs a waker reading through reader (the quiet log if nil)
// with cfg (its poll interval an hour unless set) and, with listen, a
// LISTEN connection waking it, until the test ends. It returns once the
// waker handled its first wake (with nobody watching yet, it reads
// nothing).
func setupWaker(t *testing.T, cfg sync.SpaceWakerConfig, listen bool, reader func(db *dbtest.DB) sync.ChangedSpacesReader) *wakeBundle {
	t.Helper()
	db := dbtest.NewDB(t)
	b := &wakeBundle{db: db, notify: postgres.NewEventLog(db.Pool, nil), reg: prometheus.NewRegistry(), bc: sync.NewSpaceBroadcast(),
		quiet: postgres.NewEventLog(db.Pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})}
	t.Cleanup(b.notify.Close)
	t.Cleanup(b.quiet.Close)
	var r sync.ChangedSpacesReader = b.quiet
	if reader != nil {
		r = reader(db)
	}
	cfg.Registerer = b.reg
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour
	}
	b.waker = sync.NewSpaceWaker(r, b.bc, &cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	t.Cleanup(func() { cancel(); <-done; <-done })
	go func() { _ = b.waker.Run(ctx); done <- struct{}{} }()
	if listen {
		l := postgres.NewListener(b.waker.Wake, &postgres.ListenerConfig{ConnString: db.URL})
		go func() { _ = l.Run(ctx); done <- struct{}{} }()
	} else {
		done <- struct{}{}
		b.waker.Wake()
	}
	b.waitReads(t, "", 1)
	return b
}

// waitReads waits until the waker made n reads with result (any, if "").
func (b *wakeBundle) waitReads(t *testing.T, result string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.reads(t, result) >= n }, 20*time.Second, time.Millisecond,
		"waited for %d reads with result %s", n, result)
}

func (b *wakeBundle) reads(t *testing.T, result string) int {
	t.Helper()
	return int(b.counter(t, "bothy_event_wake_reads_total", result))
}

// counter is the sum of the waker's counter name over the series whose
// one label is label (all, if "").
func (b *wakeBundle) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == name && (label == "" || m.GetLabel()[0].GetValue() == label) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// watch watches space until the test ends and returns its current channel.
func (b *wakeBundle) watch(t *testing.T, space string) <-chan struct{} {
	t.Helper()
	changed, stop := b.bc.Watch(space)
	t.Cleanup(stop)
	return changed()
}

func appendTo(t *testing.T, log *postgres.EventLog, space string, n int) {
	t.Helper()
	news := make([]sync.NewEvent, n)
	for i := range news {
		news[i] = sync.NewEvent{Space: space, Type: "item.created", Actor: "alice"}
	}
	_, err := log.Write(context.Background(), func(context.Context, pgx.Tx) ([]sync.NewEvent, error) { return news, nil })
	require.NoError(t, err)
}

func requireWoken(t *testing.T, ch <-chan struct{}, space string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("the readers of %s were not woken", space)
	}
}

// requireAsleep checks that ch is open once every wake begun so far has
// ended (Watch waits for the broadcast's lock, which a wake holds
// throughout).
func (b *wakeBundle) requireAsleep(t *testing.T, ch <-chan struct{}, space string) {
	t.Helper()
	_, stop := b.bc.Watch("sync-point")
	stop()
	select {
	case <-ch:
		t.Fatalf("the readers of %s were woken by another space's event", space)
	default:
	}
}

func TestSpaceWaker(t *testing.T) {
	t.Parallel()

	t.Run("WakesOnlyTheReadersOfTheSpaceThatChanged", func(t *testing.T) {
		t.Parallel()
		b := setupWaker(t, sync.SpaceWakerConfig{}, true, nil)
		a, other := b.watch(t, "a"), b.watch(t, "b")
		appendTo(t, b.notify, "a", 1)
		requireWoken(t, a, "a")
		b.requireAsleep(t, other, "b")
		require.Eventually(t, func() bool { return b.counter(t, "bothy_event_waiters_woken_total", "") == 1 }, 20*time.Second,
			time.Millisecond, "one reader woken, the one of a, in one wake that adds all it woke")
	})
	t.Run("ALostNotificationIsCoveredByTheNextRead", func(t *testing.T) {
		t.Parallel()
		b := setupWaker(t, sync.SpaceWakerConfig{}, true, nil)
		a, other, idle := b.watch(t, "a"), b.watch(t, "b"), b.watch(t, "c")
		appendTo(t, b.quiet, "a", 1) // committed, its notification lost
		appendTo(t, b.notify, "b", 1)
		requireWoken(t, other, "b")
		requireWoken(t, a, "a")
		b.requireAsleep(t, idle, "c")
	})
	t.Run("ReadsNothingWhileNobodyWatches", func(t *testing.T) {
		t.Parallel()
		b := setupWaker(t, sync.SpaceWakerConfig{}, true, nil)
		skipped := b.reads(t, "skipped")
		appendTo(t, b.notify, "a", 1)
		b.waitReads(t, "skipped", skipped+1)
		require.Zero(t, b.reads(t, "spaces")+b.reads(t, "all"), "reads with nobody to wake")
		a := b.watch(t, "a")
		appendTo(t, b.notify, "a", 1)
		requireWoken(t, a, "a")
	})
	t.Run("ItsPollCoversALostNotification", func(t *testing.T) {
		t.Parallel()
		b := setupWaker(t, sync.SpaceWakerConfig{PollInterval: 20 * time.Millisecond}, true, nil)
		a := b.watch(t, "a")
		appendTo(t, b.quiet, "a", 1) // committed, its notification lost, and no other comes
		requireWoken(t, a, "a")
	})
	t.Run("MoreNewSeqsThanTheScanLimitWakeEveryReader", func(t *testing.T) {
		t.Parallel()
		b := setupWaker(t, sync.SpaceWakerConfig{ScanLimit: 2}, false, nil)
		other := b.watch(t, "b")
		appendTo(t, b.quiet, "a", 3)
		b.waker.Wake()
		requireWoken(t, other, "b")
		b.waitReads(t, "all", 1)
	})
	t.Run("AFailedReadWakesEveryReader", func(t *testing.T) {
		t.Parallel()
		var pool *pgxpool.Pool
		b := setupWaker(t, sync.SpaceWakerConfig{}, false, func(db *dbtest.DB) sync.ChangedSpacesReader {
			var err error
			pool, err = pgxpool.New(context.Background(), db.URL)
			require.NoError(t, err)
			log := postgres.NewEventLog(pool, &postgres.EventLogConfig{Notify: postgres.NotifyNone})
			t.Cleanup(log.Close)
			return log
		})
		other := b.watch(t, "b")
		pool.Close()
		b.waker.Wake()
		requireWoken(t, other, "b")
		b.waitReads(t, "error", 1)
	})
}

func TestEventLog_ChangedSpaces(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	ctx := context.Background()
	appendTyped(t, b.log, "a", "item.created", "b", "item.created", "a", "item.updated", "c", "item.created") // seqs 1..4
	read := func(after, limit int64) *sync.ChangedSpaces {
		t.Helper()
		cs, err := b.log.ChangedSpaces(ctx, &sync.ChangedSpacesParams{AfterSeq: after, Limit: limit})
		require.NoError(t, err)
		return cs
	}
	cs := read(1, 3)
	require.Equal(t, int64(4), cs.Head)
	require.True(t, cs.Complete)
	require.ElementsMatch(t, []string{"a", "b", "c"}, cs.Spaces, "each space once")
	require.Equal(t, []string{"c"}, read(3, 10).Spaces)
	require.Equal(t, &sync.ChangedSpaces{Head: 4, Complete: true}, read(4, 10), "nothing new")
	require.Equal(t, &sync.ChangedSpaces{Head: 4}, read(0, 3), "more new seqs than the limit")
	require.Equal(t, &sync.ChangedSpaces{Head: 4}, read(9, 10), "a head below the position: a restored database")
}

// TestEventLog_ChangedSpacesScansTheKeyInAPlanMadeWhileThePartitionWasSmall:
// the waker reads the newest few seqs on every notification, on pool
// connections whose cached plan was made while the current partition was
// small; that plan must read the primary key's range, not the partition.
func TestEventLog_ChangedSpacesScansTheKeyInAPlanMadeWhileThePartitionWasSmall(t *testing.T) {
	t.Parallel()
	b := setup(t, 100)
	disableAutovacuum(t, b)
	appendN(t, b.log, 50)
	plan := b.db.GenericPlan(t, postgres.ChangedSpacesSQL, `45, 10000`)
	var nodes []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(plan), &nodes))
	for _, n := range nodes[0].Plan.all() {
		require.False(t, n.Type == "Seq Scan" && strings.HasPrefix(n.Relation, "event_log"), "plan:\n%s", plan)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Plans    []planNode `json:"Plans"`
}

func (n planNode) all() []planNode {
	out := []planNode{n}
	for _, c := range n.Plans {
		out = append(out, c.all()...)
	}
	return out
}
