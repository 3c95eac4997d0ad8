package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
)

// requireHeadDurable runs the CLI with args twice to warm up, advances the
// head by 7 with an asynchronous commit (as a producer takes seqs inside
// its window), runs args again and requires printed, given its output, to be
// 7, crashes the cluster and requires the head to have survived: a seq
// printed before it was on disk could later be handed to another event.
func requireHeadDurable(t *testing.T, printed func(out string) int64, args ...string) {
	t.Helper()
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	environ := []string{"BOTHY_DATABASE_URL=" + p.URL}
	pool := p.Pool(t)

	// Warm up first (see dbtest.BeginAsync): touch the counter's page and
	// run the command, so that neither writes WAL after the commit below.
	_, err := pool.Exec(ctx, `UPDATE event_seq SET last_seq = last_seq`)
	require.NoError(t, err)
	for range 2 {
		code, _, stderr := runCLI(t, environ, args...)
		require.Equal(t, 0, code, stderr)
	}
	dbtest.BumpSeqAsync(t, pool, 7)

	code, out, stderr := runCLI(t, environ, args...)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, int64(7), printed(out))

	pool = p.CrashAndReopen(t, pool)
	head, err := postgres.Head(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, int64(7), head, "%v printed a head that the crash took back", args)
}

// TestConsumersStatusShowsOnlyDurableState: "consumers status" may read a
// head that a producer committed asynchronously and that is not on disk yet.
// It must not print a head that a crash then takes back: it flushes the WAL
// before printing.
func TestConsumersStatusShowsOnlyDurableState(t *testing.T) {
	t.Parallel()
	requireHeadDurable(t, func(out string) int64 {
		var sts []sync.ConsumerStatusJSON
		require.NoError(t, json.Unmarshal([]byte(out), &sts))
		require.NotEmpty(t, sts)
		return sts[0].Head
	}, "consumers", "status", "--json")
}

// TestRestoreFinalizeDryRunShowsOnlyDurableState: "restore finalize"
// without --yes prints the head each cursor would move to; it must not
// print a head that a crash then takes back either.
func TestRestoreFinalizeDryRunShowsOnlyDurableState(t *testing.T) {
	t.Parallel()
	requireHeadDurable(t, func(out string) int64 {
		var plan restoreReport
		require.NoError(t, json.Unmarshal([]byte(out), &plan))
		require.True(t, plan.DryRun)
		require.NotEmpty(t, plan.Cursors)
		return plan.Cursors[0].To
	}, "restore", "finalize", "--json")
}

// privateSubscription starts a private cluster and creates in it, through
// the CLI, principal alice with admin on s1 and a subscription of hers; it
// returns the cluster, the CLI's environment and the subscription's id.
func privateSubscription(t *testing.T) (*dbtest.Private, []string, string) {
	t.Helper()
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	environ := []string{"BOTHY_DATABASE_URL=" + p.URL, "BOTHY_WEBHOOKS_ALLOW_PRIVATE_TARGETS=true"}
	for _, args := range [][]string{
		{"authz", "principal", "alice"},
		{"authz", "grant", "--space", "s1", "--principal", "alice", "--right", "admin"},
	} {
		code, _, stderr := runCLI(t, environ, args...)
		require.Equal(t, 0, code, stderr)
	}
	code, out, stderr := runCLI(t, environ, "webhooks", "create", "--owner", "alice", "--space", "s1",
		"--url", "http://127.0.0.1:9/hook", "--json")
	require.Equal(t, 0, code, stderr)
	var sub struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sub))
	return p, environ, sub.ID
}

// requireListingDurable runs the CLI with args twice to warm up, commits a
// pending delivery of subscription subID asynchronously (as a round does),
// runs args again and checks its output with shows, crashes the cluster and
// requires the delivery to be there after recovery.
func requireListingDurable(t *testing.T, p *dbtest.Private, environ []string, subID string, shows func(out string), args ...string) {
	t.Helper()
	ctx := context.Background()
	pool := p.Pool(t)

	// Warm up first (see dbtest.BeginAsync): the vacuum removes the dead
	// catalog rows the migrations left, which the CLI's new connections
	// would prune.
	_, err := pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	for range 2 {
		code, _, stderr := runCLI(t, environ, args...)
		require.Equal(t, 0, code, stderr)
	}
	dbtest.CommitAsync(t, pool, `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id) VALUES ($1, 4242, gen_random_uuid())`, subID)

	code, out, stderr := runCLI(t, environ, args...)
	require.Equal(t, 0, code, stderr)
	shows(out)

	pool = p.CrashAndReopen(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE event_seq = 4242`).Scan(&n))
	require.Equal(t, 1, n, "%v showed a delivery that the crash took back", args)
}

// TestWebhooksDeliveriesShowsOnlyDurableState: "webhooks deliveries" lists
// rows that rounds commit asynchronously; it must not print a delivery that
// a crash then takes back.
func TestWebhooksDeliveriesShowsOnlyDurableState(t *testing.T) {
	t.Parallel()
	p, environ, subID := privateSubscription(t)
	requireListingDurable(t, p, environ, subID, func(out string) { require.Contains(t, out, "4242") },
		"webhooks", "deliveries", subID, "--json")
}

// TestWebhooksListShowsOnlyDurableState: "webhooks list" counts the pending
// deliveries that rounds commit asynchronously; it must not count one that a
// crash then takes back.
func TestWebhooksListShowsOnlyDurableState(t *testing.T) {
	t.Parallel()
	p, environ, subID := privateSubscription(t)
	requireListingDurable(t, p, environ, subID, func(out string) {
		var subs []struct {
			Pending int64 `json:"pending"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &subs))
		require.Len(t, subs, 1)
		require.Equal(t, int64(1), subs[0].Pending)
	}, "webhooks", "list", "--json")
}
