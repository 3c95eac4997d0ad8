package webhooks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

// attempt records an attempt of subscription id directly: status 0 is no
// answer.
func attempt(t *testing.T, b *bundle, id uuid.UUID, at time.Time, status int, secs float64) {
	t.Helper()
	var code *int
	if status != 0 {
		code = &status
	}
	_, err := b.db.Pool.Exec(context.Background(), `
INSERT INTO webhook_attempts (subscription_id, event_seq, attempted_at, status_code, duration_seconds) VALUES ($1, 1, $2, $3, $4)`,
		id, at, code, secs)
	require.NoError(t, err)
}

func TestStats(t *testing.T) {
	t.Parallel()

	t.Run("CountsOutcomesLatencyAndRatePerInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		other, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/y"})
		t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
		// 08:00-09:00: three 2xx of 0.1, 0.2, 0.3 s and a 500 of 1.0 s.
		for _, a := range []struct {
			min    int
			status int
			secs   float64
		}{{1, 200, 0.1}, {2, 204, 0.2}, {3, 200, 0.3}, {59, 500, 1.0}} {
			attempt(t, b, s.ID, t0.Add(time.Duration(a.min)*time.Minute), a.status, a.secs)
		}
		// 09:00-10:00: nothing. 10:00-11:00: a refusal before any request and a timeout of 2 s.
		attempt(t, b, s.ID, t0.Add(2*time.Hour), 0, 0)
		attempt(t, b, s.ID, t0.Add(2*time.Hour+time.Minute), 0, 2)
		// Outside the window, and another subscription's: not counted.
		attempt(t, b, s.ID, t0.Add(-time.Second), 200, 0.1)
		attempt(t, b, s.ID, t0.Add(3*time.Hour), 200, 0.1)
		attempt(t, b, other.ID, t0.Add(time.Minute), 500, 0.1)

		v, err := webhooks.Stats(context.Background(), b.db.Pool, &webhooks.StatsParams{SubscriptionID: s.ID,
			Since: t0, Until: t0.Add(3 * time.Hour), Step: time.Hour})
		require.NoError(t, err)
		require.Equal(t, int64(3600), v.StepSeconds)
		require.Equal(t, int64(3), v.OK)
		require.Equal(t, int64(3), v.Failed)
		require.InDelta(t, 0.5, *v.SuccessRate, 1e-9)
		require.Len(t, v.Intervals, 3)

		first := v.Intervals[0]
		require.Equal(t, t0, first.Start)
		require.Equal(t, t0.Add(time.Hour), first.End)
		require.Equal(t, int64(3), first.OK)
		require.Equal(t, int64(1), first.Failed)
		require.InDelta(t, 0.25, *first.LatencyP50Seconds, 1e-9, "median of 0.1, 0.2, 0.3, 1.0")
		require.InDelta(t, 0.895, *first.LatencyP95Seconds, 1e-9)
		require.InDelta(t, 0.75, *first.SuccessRate, 1e-9)

		empty := v.Intervals[1]
		require.Zero(t, empty.OK+empty.Failed)
		require.Nil(t, empty.LatencyP50Seconds)
		require.Nil(t, empty.SuccessRate)

		third := v.Intervals[2]
		require.Equal(t, int64(2), third.Failed)
		require.InDelta(t, 2.0, *third.LatencyP50Seconds, 1e-9, "the refusal sent no request: only the timeout counts")
		require.InDelta(t, 0.0, *third.SuccessRate, 1e-9)
	})

	t.Run("DefaultsToTheLastDayByHourAndCutsAShortLastInterval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		attempt(t, b, s.ID, time.Now().Add(-time.Minute), 200, 0.05)
		v, err := webhooks.Stats(context.Background(), b.db.Pool, &webhooks.StatsParams{SubscriptionID: s.ID})
		require.NoError(t, err)
		require.Len(t, v.Intervals, 24)
		require.Equal(t, 24*time.Hour, v.Until.Sub(v.Since))
		require.True(t, v.Until.After(time.Now()) && v.Until.Equal(v.Until.Truncate(time.Hour)), "until %s", v.Until)
		require.Equal(t, int64(1), v.OK)

		t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
		v, err = webhooks.Stats(context.Background(), b.db.Pool, &webhooks.StatsParams{SubscriptionID: s.ID,
			Since: t0, Until: t0.Add(90 * time.Minute), Step: time.Hour})
		require.NoError(t, err)
		require.Len(t, v.Intervals, 2)
		require.Equal(t, t0.Add(90*time.Minute), v.Intervals[1].End)
	})

	t.Run("RefusesAWindowOutOfBoundsNamingTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s, _ := b.subscribe(t, &webhooks.CreateParams{URL: "http://127.0.0.1:9/x"})
		t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
		for _, c := range []struct {
			p    webhooks.StatsParams
			want string
		}{
			{webhooks.StatsParams{Step: time.Second}, "step: 1s, want 1m0s to 24h0m0s"},
			{webhooks.StatsParams{Step: 90 * time.Second / 60 * 61}, "step:"},
			{webhooks.StatsParams{Since: t0, Until: t0}, "since:"},
			{webhooks.StatsParams{Since: t0, Until: t0.Add(100 * 24 * time.Hour), Step: 24 * time.Hour}, "since: the window"},
			{webhooks.StatsParams{Since: t0, Until: t0.Add(24 * time.Hour), Step: time.Minute}, "step: 1m0s makes 1440 intervals"},
		} {
			c.p.SubscriptionID = s.ID
			_, err := webhooks.Stats(context.Background(), b.db.Pool, &c.p)
			require.ErrorIs(t, err, webhooks.ErrInvalid)
			require.ErrorContains(t, err, c.want)
		}
		_, err := webhooks.Stats(context.Background(), b.db.Pool, &webhooks.StatsParams{SubscriptionID: uuid.New()})
		require.ErrorIs(t, err, webhooks.ErrNotFound)
	})

	t.Run("ReadsTheWindowByTheIndex", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx := context.Background()
		conn, err := b.db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(ctx, `SET enable_seqscan = off`)
		require.NoError(t, err)
		rows, err := conn.Query(ctx, `EXPLAIN (FORMAT TEXT) `+webhooks.StatsSQL, uuid.New(), time.Now().Add(-time.Hour), time.Now(), 60.0, 60)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		plan := strings.Join(lines, "\n")
		require.Contains(t, plan, "webhook_attempts_subscription_time")
	})
}
