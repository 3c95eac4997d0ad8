package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// TestLagCollector_ShowsOnlyDurableState: the head and lag gauges may be
// read from a producer's or round's commit that is not on disk yet; a
// scrape must not publish a head that a crash then takes back (the seq
// would later be handed to another event).
func TestLagCollector_ShowsOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)

	// Warm up first (see dbtest.BeginAsync): touch the counter's page and
	// read the statuses, so that neither writes WAL after the commit below.
	_, err := pool.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq`)
	require.NoError(t, err)
	for range 2 {
		_, err = postgres.ConsumerStatuses(ctx, pool)
		require.NoError(t, err)
	}
	// As the counter is taken inside a producer's window: asynchronously.
	dbtest.BumpSeqAsync(t, pool, 7)

	want := "# HELP bothy_event_log_head_seq The newest seq handed out by the event log.\n" +
		"# TYPE bothy_event_log_head_seq gauge\nbothy_event_log_head_seq 7\n"
	require.NoError(t, testutil.CollectAndCompare(postgres.NewLagCollector(pool, nil), strings.NewReader(want), "bothy_event_log_head_seq"))

	pool = p.CrashAndReopen(t, pool)
	head, err := postgres.Head(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(7), head, "the scrape published a head that the crash took back")
}
