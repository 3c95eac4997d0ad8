package webhooks_test

import (
	"bytes"
	"context"
	"os/exec"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/ops/promtooltest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// gauges gathers reg and returns the value of every unlabelled gauge and of
// bothy_webhook_subscriptions by status.
func gauges(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			out[name] = m.GetGauge().GetValue()
		}
	}
	return out
}

// addSubscription writes an active subscription of alice on s1 with one
// pending delivery created ago before now, and the claim pump_until (an SQL
// expression: NULL, or a time relative to now()).
func addSubscription(t *testing.T, pool *pgxpool.Pool, ago, pumpUntil string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, pump_until)
VALUES (gen_random_uuid(), 'alice', 's1', 'https://receiver.invalid/hook',
        'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', `+pumpUntil+`)
RETURNING id`).Scan(&id))
	if ago != "" {
		// The head, and a younger delivery behind it.
		_, err := pool.Exec(ctx, `
INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, created_at)
VALUES ($1, 10, gen_random_uuid(), now() - $2::interval), ($1, 11, gen_random_uuid(), now() - $2::interval + interval '1 second')`,
			id, ago)
		require.NoError(t, err)
	}
	return id
}

// TestMetrics_DeliveryStall: the stall gauge counts active subscriptions
// with pending deliveries and no live claim, from the later of the claim's
// end and the head's creation. A sender waiting for a retry (claim live)
// and disabled subscriptions do not count; the oldest pending delivery
// counts every active subscription.
func TestMetrics_DeliveryStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	reg := prometheus.NewRegistry()
	webhooks.NewMetrics(reg, db.Pool, quiet)

	g := gauges(t, reg)
	require.Zero(t, g["bothy_webhook_delivery_stall_seconds"], "no subscriptions")
	require.Zero(t, g["bothy_webhook_oldest_pending_delivery_age_seconds"])
	require.Zero(t, g["bothy_webhook_subscriptions/active"])

	// Never picked up: stalled since its head was created 10 minutes ago.
	unsent := addSubscription(t, db.Pool, "10 minutes", "NULL")
	// Waiting for a retry: the claim runs past the retry's time.
	addSubscription(t, db.Pool, "2 hours", "now() + interval '1 hour'")
	// The sender's claim ran out 5 minutes ago (its head is older).
	addSubscription(t, db.Pool, "3 hours", "now() - interval '5 minutes'")
	// Nothing pending, claim long gone.
	addSubscription(t, db.Pool, "", "now() - interval '1 day'")
	// Disabled with pending deliveries: neither stalled nor pending.
	off := addSubscription(t, db.Pool, "5 hours", "NULL")
	require.NoError(t, webhooks.Disable(ctx, db.Pool, off, "test"))

	g = gauges(t, reg)
	require.InDelta(t, 600, g["bothy_webhook_delivery_stall_seconds"], 5)
	require.InDelta(t, 3*3600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], 5)
	require.Equal(t, 4.0, g["bothy_webhook_subscriptions/active"])
	require.Equal(t, 1.0, g["bothy_webhook_subscriptions/disabled_manual"])
	require.Equal(t, 0.0, g["bothy_webhook_subscriptions/disabled_failing"])

	// A sender claims the unsent one: the expired claim is the longest stall.
	_, err := db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET pump_until = now() + interval '45 seconds' WHERE id = $1`, unsent)
	require.NoError(t, err)
	require.InDelta(t, 300, gauges(t, reg)["bothy_webhook_delivery_stall_seconds"], 5)

	// Every subscription with pending deliveries has a live sender.
	_, err = db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET pump_until = now() + interval '1 minute' WHERE status = 'active'`)
	require.NoError(t, err)
	g = gauges(t, reg)
	require.Zero(t, g["bothy_webhook_delivery_stall_seconds"])
	require.InDelta(t, 3*3600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], 5)
}

// TestMetrics_UnreadableDatabaseKeepsTheScrape: a failed read drops the
// database gauges from this scrape only; the other metrics are still
// gathered (an invalid metric would fail the whole /metrics).
func TestMetrics_UnreadableDatabaseKeepsTheScrape(t *testing.T) {
	t.Parallel()
	db := dbtest.NewDB(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	require.NoError(t, err)
	pool.Close()
	reg := prometheus.NewRegistry()
	webhooks.NewMetrics(reg, pool, quiet)
	g := gauges(t, reg)
	require.NotContains(t, g, "bothy_webhook_delivery_stall_seconds")
	require.NotContains(t, g, "bothy_webhook_subscriptions/active")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	names := []string{}
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	require.Contains(t, names, "bothy_webhook_deliveries_total")
}

// TestMetrics_PromtoolCheckMetrics runs "promtool check metrics" on every
// webhook metric, the database gauges with values included (the ops
// scrape test runs without the webhooks module).
func TestMetrics_PromtoolCheckMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.NewDB(t)
	require.NoError(t, authz.CreatePrincipal(ctx, db.Pool, "alice", authz.KindUser))
	addSubscription(t, db.Pool, "1 minute", "NULL")
	reg := prometheus.NewRegistry()
	webhooks.NewMetrics(reg, db.Pool, quiet)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&buf, mf)
		require.NoError(t, err)
	}
	require.Contains(t, buf.String(), "bothy_webhook_delivery_stall_seconds ")
	bin := promtooltest.Path(t)
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}
