package webhooks_test

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/internal/tooltest"
	"github.com/bothy/bothy/services/server/internal/authz"
	"github.com/bothy/bothy/services/server/internal/dbtest"
	"github.com/bothy/bothy/services/server/internal/sync/adapters/postgres"
	"github.com/bothy/bothy/services/server/internal/webhooks"
	"github.com/bothy/bothy/services/server/internal/webhooks/delivery"
)

// durableOn is the durability barrier on a pool, as the event log provides
// it to the server's modules.
type durableOn struct{ pool *pgxpool.Pool }

func (d durableOn) Durable(ctx context.Context) error { return postgres.Durable(ctx, d.pool) }

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

// metricsOn registers the webhook metrics of a fresh database, in which
// principal alice exists, on a new registry.
func metricsOn(t *testing.T) (*dbtest.DB, *prometheus.Registry) {
	t.Helper()
	db := dbtest.NewDB(t)
	require.NoError(t, authz.CreatePrincipal(context.Background(), db.Pool, "alice", authz.KindUser))
	reg := prometheus.NewRegistry()
	delivery.NewMetrics(reg, db.Pool, durableOn{db.Pool}, quiet)
	return db, reg
}

// addSubscription writes an active subscription of alice on s1 with one
// pending delivery created ago before now, and the claim lease_until (an SQL
// expression: NULL, or a time relative to now()).
func addSubscription(t *testing.T, pool *pgxpool.Pool, ago, leaseUntil string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var id uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `
INSERT INTO webhook_subscriptions (id, owner, space, url, secret, lease_until)
VALUES (gen_random_uuid(), 'alice', 's1', 'https://receiver.invalid/hook',
        'whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=', `+leaseUntil+`)
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
	db, reg := metricsOn(t)

	g := gauges(t, reg)
	require.Zero(t, g["bothy_webhook_delivery_stall_seconds"], "no subscriptions")
	require.Zero(t, g["bothy_webhook_oldest_pending_delivery_age_seconds"])
	require.Zero(t, g["bothy_webhook_subscriptions/active"])

	// The rows below are dated relative to the database's now(): each
	// gauge reads its figure plus the time the scrape took to come.
	written := time.Now()
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
	requireAge(t, 600, g["bothy_webhook_delivery_stall_seconds"], written)
	requireAge(t, 3*3600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], written)
	require.Equal(t, 4.0, g["bothy_webhook_subscriptions/active"])
	require.Equal(t, 1.0, g["bothy_webhook_subscriptions/disabled_manual"])
	require.Equal(t, 0.0, g["bothy_webhook_subscriptions/disabled_failing"])

	// A sender claims the unsent one: the expired claim is the longest stall.
	_, err := db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET lease_until = now() + interval '45 seconds' WHERE id = $1`, unsent)
	require.NoError(t, err)
	requireAge(t, 300, gauges(t, reg)["bothy_webhook_delivery_stall_seconds"], written)

	// Every subscription with pending deliveries has a live sender.
	_, err = db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET lease_until = now() + interval '1 minute' WHERE status = 'active'`)
	require.NoError(t, err)
	g = gauges(t, reg)
	require.Zero(t, g["bothy_webhook_delivery_stall_seconds"])
	requireAge(t, 3*3600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], written)
}

// requireAge requires that an age gauge reads want seconds, plus at most
// the time since its rows were written (relative to now()), the earliest
// of them after written.
func requireAge(t *testing.T, want, got float64, written time.Time) {
	t.Helper()
	require.GreaterOrEqual(t, got, want)
	require.LessOrEqual(t, got, want+time.Since(written).Seconds())
}

// TestMetrics_DeliveryStallCountsDueDeliveriesOnly: an unordered
// subscription whose pending deliveries all wait for their retries has no
// sender on purpose (its pump lets go and a keeper job comes back at the
// first retry's time), so a failing receiver must not look like a stall;
// a retry whose time passed without a sender is one, counted from that time.
func TestMetrics_DeliveryStallCountsDueDeliveriesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, reg := metricsOn(t)

	// Created two hours ago, failing since: the retries are due in 20
	// minutes, the keeper wakes then, and no pump holds the subscription.
	id := addSubscription(t, db.Pool, "2 hours", "NULL")
	_, err := db.Pool.Exec(ctx, `UPDATE webhook_subscriptions SET policy = 'unordered', max_in_flight = 10,
    keeper_wake_at = now() + interval '20 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET attempts = 5, first_attempt_at = created_at,
    next_attempt_at = now() + interval '20 minutes' WHERE subscription_id = $1`, id)
	require.NoError(t, err)
	g := gauges(t, reg)
	require.Zero(t, g["bothy_webhook_delivery_stall_seconds"], "waiting for retries is no stall")
	require.InDelta(t, 2*3600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], 5)

	// The first retry was due 3 minutes ago and no sender took it.
	_, err = db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET next_attempt_at = now() - interval '3 minutes'
    WHERE subscription_id = $1 AND event_seq = 11`, id)
	require.NoError(t, err)
	require.InDelta(t, 180, gauges(t, reg)["bothy_webhook_delivery_stall_seconds"], 5)
}

// TestMetrics_ResentDeliveryCountsFromItsResend: a resend keeps a
// delivery's creation time; the gauges count the resent delivery from the
// resend, when it became pending and due again, not from its creation.
func TestMetrics_ResentDeliveryCountsFromItsResend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, reg := metricsOn(t)
	written := time.Now()
	// Created three hours ago; the head was resent ten minutes ago, as
	// Resend does it, and no sender took it since.
	id := addSubscription(t, db.Pool, "3 hours", "NULL")
	_, err := db.Pool.Exec(ctx, `UPDATE webhook_deliveries SET resent_at = now() - interval '10 minutes',
    next_attempt_at = now() - interval '10 minutes' WHERE subscription_id = $1 AND event_seq = 10`, id)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE subscription_id = $1 AND event_seq = 11`, id)
	require.NoError(t, err)
	g := gauges(t, reg)
	requireAge(t, 600, g["bothy_webhook_oldest_pending_delivery_age_seconds"], written)
	requireAge(t, 600, g["bothy_webhook_delivery_stall_seconds"], written)
}

// TestMetrics_ShowsOnlyDurableState: the gauges count deliveries that
// rounds commit asynchronously; a scrape must not show a pending delivery
// that a crash then takes back.
func TestMetrics_ShowsOnlyDurableState(t *testing.T) {
	p := dbtest.NewPrivate(t, dbtest.QuietCrashSettings)
	ctx := context.Background()
	pool := p.Pool(t)
	require.NoError(t, authz.CreatePrincipal(ctx, pool, "alice", authz.KindUser))
	id := addSubscription(t, pool, "", "NULL")
	reg := prometheus.NewRegistry()
	delivery.NewMetrics(reg, pool, durableOn{pool}, quiet)

	// Warm up first (see dbtest.BeginAsync): the vacuum removes dead rows
	// the reads would prune, and the scrapes read the catalog once.
	_, err := pool.Exec(ctx, `VACUUM`)
	require.NoError(t, err)
	for range 2 {
		require.Zero(t, gauges(t, reg)["bothy_webhook_oldest_pending_delivery_age_seconds"])
	}
	// As a round writes a delivery: committed with synchronous_commit off.
	dbtest.CommitAsync(t, pool, `INSERT INTO webhook_deliveries (subscription_id, event_seq, event_id, created_at)
VALUES ($1, 4242, gen_random_uuid(), now() - interval '1 hour')`, id)

	require.InDelta(t, 3600, gauges(t, reg)["bothy_webhook_oldest_pending_delivery_age_seconds"], 60)

	pool = p.CrashAndReopen(t, pool)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE event_seq = 4242`).Scan(&n))
	require.Equal(t, 1, n, "the scrape showed a delivery that the crash took back")
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
	delivery.NewMetrics(reg, pool, durableOn{pool}, quiet)
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
	delivery.NewMetrics(reg, db.Pool, durableOn{db.Pool}, quiet)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	for _, mf := range mfs {
		_, err := expfmt.MetricFamilyToText(&buf, mf)
		require.NoError(t, err)
	}
	require.Contains(t, buf.String(), "bothy_webhook_delivery_stall_seconds ")
	bin := tooltest.Need(t, tooltest.Promtool)
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool check metrics:\n%s", out)
}
