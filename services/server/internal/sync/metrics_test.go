package sync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestMetrics_Observe(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	m.init("push", 1000)
	m.observe("push", &roundOutcome{res: RoundResult{Events: 3, Read: 3, Jobs: 2}, seconds: 0.004, batch: 1000})
	m.observe("push", &roundOutcome{res: RoundResult{}, seconds: 0.001, batch: 1000}) // idle: no size
	m.observe("push", &roundOutcome{res: RoundResult{Read: 1000}, err: context.DeadlineExceeded, timedOut: true, batch: 500})
	m.observe("push", &roundOutcome{err: errors.New("poison"), batch: 500})
	m.observe("push", &roundOutcome{res: RoundResult{Locked: true}, batch: 500})

	for _, c := range []prometheus.Collector{m.rounds, m.roundDuration, m.roundEvents, m.roundJobs, m.batch, m.events, m.jobs, m.lost} {
		problems, err := testutil.CollectAndLint(c)
		require.NoError(t, err)
		require.Empty(t, problems)
	}
	require.NoError(t, testutil.CollectAndCompare(m.rounds, strings.NewReader(`
# HELP bothy_event_consumer_rounds_total Consumer rounds by result: ok (committed), locked (another worker held the cursor), timeout (rolled back, out of consumer.round_timeout or a statement timeout: the next round reads half the events), error (rolled back for another reason).
# TYPE bothy_event_consumer_rounds_total counter
bothy_event_consumer_rounds_total{consumer="push",result="error"} 1
bothy_event_consumer_rounds_total{consumer="push",result="locked"} 1
bothy_event_consumer_rounds_total{consumer="push",result="ok"} 2
bothy_event_consumer_rounds_total{consumer="push",result="timeout"} 1
`)))
	require.NoError(t, testutil.CollectAndCompare(m.batch, strings.NewReader(`
# HELP bothy_event_consumer_batch_size Most events the consumer's next round reads: consumer.batch_size, or less after rounds that timed out.
# TYPE bothy_event_consumer_batch_size gauge
bothy_event_consumer_batch_size{consumer="push"} 500
`)))
	require.Equal(t, 1, testutil.CollectAndCount(m.roundEvents))
	require.NoError(t, testutil.CollectAndCompare(m.roundJobs, strings.NewReader(`
# HELP bothy_event_consumer_round_jobs Jobs a committed round that read events inserted.
# TYPE bothy_event_consumer_round_jobs histogram
`+histogramLines("bothy_event_consumer_round_jobs", `consumer="push"`, append([]float64{0}, sizeBuckets...), 2)+`
`)))
}

// histogramLines is the text form of a histogram holding one observation
// of v.
func histogramLines(name, labels string, buckets []float64, v float64) string {
	var b strings.Builder
	for _, le := range buckets {
		n := 0
		if v <= le {
			n = 1
		}
		fmt.Fprintf(&b, "%s_bucket{%s,le=\"%g\"} %d\n", name, labels, le, n)
	}
	fmt.Fprintf(&b, "%s_bucket{%s,le=\"+Inf\"} 1\n%s_sum{%s} %g\n%s_count{%s} 1", name, labels, name, labels, v, name, labels)
	return b.String()
}

func TestIsTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("round %q: insert 6720 jobs: %w", "push", context.DeadlineExceeded), true},
		{fmt.Errorf("read events: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}), true},
		{fmt.Errorf("read events: %w", &pgconn.PgError{Code: "23505"}), false},
		{context.Canceled, false},
		{errors.New("poison event"), false},
	} {
		require.Equal(t, tc.want, isTimeout(tc.err), "%v", tc.err)
	}
}

func TestBatchSizer(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	t0 := time.Now()
	b := newBatchSizer(1000, time.Minute)
	b.timedOut(168, t0) // read fewer than the batch: halve what was read
	require.Equal(t, 84, b.size)
	b.timedOut(0, t0) // failed before reading: halve the batch
	require.Equal(t, 42, b.size)
	b.succeeded(time.Millisecond, timeout, t0)
	require.Equal(t, 83, b.size, "grows, but stays below the size that timed out")
	b.succeeded(timeout/2, timeout, t0)
	require.Equal(t, 83, b.size, "a round that took half the timeout does not grow the batch")
	b.succeeded(time.Millisecond, timeout, t0.Add(2*time.Minute))
	require.Equal(t, 166, b.size, "the size that timed out is forgotten after a while")
	for range 20 {
		b.timedOut(1, t0)
	}
	require.Equal(t, 1, b.size, "never below one event")
}
