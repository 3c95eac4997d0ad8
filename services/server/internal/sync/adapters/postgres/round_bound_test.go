package postgres_test

import (
	"context"
	"io"
	"log/slog"
	gosync "sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/testwait"
)

// TestRound_TimeoutShrinksTheBatch: a consumer whose rounds cannot finish
// in time above a few events (its statement runs until the round's
// deadline cancels it) still reaches the head: every round that times out
// is tried again with half the events, and the consumer goes on at the size
// that fits. Without the shrinking every round reads the same batch, times
// out and rolls back, for ever.
func TestRound_TimeoutShrinksTheBatch(t *testing.T) {
	t.Parallel()
	const events, fits = 40, 3
	b := setup(t, 50)
	addConsumer(t, b.db, "slow")
	appendN(t, b.log, events)

	slow := &recordingConsumer{name: "slow", hook: func(ctx context.Context, tx pgx.Tx, evs []sync.Event) error {
		if len(evs) <= fits {
			return nil
		}
		_, err := tx.Exec(ctx, `SELECT pg_sleep(3600)`) // ends when the round's deadline cancels it
		return err
	}}
	var mu gosync.Mutex
	var committed []int
	var timeouts int
	reg := prometheus.NewRegistry()
	startWorker(t, b, slow, &sync.WorkerConfig{
		PollInterval: 20 * time.Millisecond, ErrorBackoff: time.Millisecond, RoundTimeout: 300 * time.Millisecond,
		Metrics: sync.NewMetrics(reg), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		AfterRound: func(_ string, res sync.RoundResult, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				timeouts++
			case res.Events > 0:
				committed = append(committed, res.Events)
			}
		},
	}, nil)

	testwait.Until(t, 30*time.Second, func() bool { return cursorOf(t, b.db, "slow") == events },
		"cursor stuck below %d: rounds larger than %d events time out", events, fits)
	requireExactlyOnce(t, b, "slow", events)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("timed out: %d rounds; committed rounds' events: %v", timeouts, committed)
	for _, n := range committed {
		require.LessOrEqual(t, n, fits)
	}
	require.Positive(t, timeouts)
	require.Equal(t, float64(timeouts), counterValue(t, reg, "bothy_event_consumer_rounds_total", "slow", "timeout"),
		"every failed round was a timeout, and counted as one")
}

// prefixConsumer covers at most max events per round through
// HandlePrefix, one job each, as a consumer does whose budget ran out.
type prefixConsumer struct {
	recordingConsumer
	max     int
	covered int // what HandlePrefix returns; 0: min(max, len(events))
	budgets []sync.WorkBudget
}

func (c *prefixConsumer) HandlePrefix(ctx context.Context, tx pgx.Tx, events []sync.Event, budget sync.WorkBudget) ([]sync.Job, int, error) {
	c.budgets = append(c.budgets, budget)
	n := min(c.max, len(events))
	jobs, err := c.Handle(ctx, tx, events[:n])
	if c.covered != 0 {
		n = c.covered
	}
	return jobs, n, err
}

func TestRound_PrefixHandler(t *testing.T) {
	t.Parallel()

	t.Run("AdvancesOnlyPastTheEventsItCovered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 50)
		addConsumer(t, b.db, "prefix")
		appendN(t, b.log, 7)
		c := &prefixConsumer{recordingConsumer: recordingConsumer{name: "prefix"}, max: 3}
		var got []sync.RoundResult
		for {
			res, err := b.rounds.Run(context.Background(), c)
			require.NoError(t, err)
			got = append(got, res)
			require.Equal(t, res.To, cursorOf(t, b.db, "prefix"))
			if !res.Full {
				break
			}
		}
		require.Len(t, got, 3)
		for i, want := range []struct {
			events, read int
			to           int64
		}{{3, 7, 3}, {3, 4, 6}, {1, 1, 7}} {
			require.Equal(t, want.events, got[i].Events, "round %d", i)
			require.Equal(t, want.read, got[i].Read, "round %d", i)
			require.Equal(t, want.to, got[i].To, "round %d", i)
			require.Equal(t, want.events, got[i].Jobs, "round %d", i)
		}
		requireExactlyOnce(t, b, "prefix", 7)
		require.Equal(t, sync.WorkBudget{Jobs: 1000, Receivers: 50_000}, c.budgets[0], "the defaults")
	})

	t.Run("AnImpossiblePrefixRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 50)
		addConsumer(t, b.db, "prefix")
		appendN(t, b.log, 2)
		for _, covered := range []int{-1, 3} {
			c := &prefixConsumer{recordingConsumer: recordingConsumer{name: "prefix"}, max: 2, covered: covered}
			_, err := b.rounds.Run(context.Background(), c)
			require.ErrorIs(t, err, sync.ErrBadPrefix)
			require.Zero(t, cursorOf(t, b.db, "prefix"))
			require.Empty(t, jobSeqs(t, b.db, "prefix"))
		}
	})
}

// counterValue reads the counter name{consumer, result} from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, consumer, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["consumer"] == consumer && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{consumer=%q,result=%q}", name, consumer, result)
	return 0
}
