package webhooks

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bothy/bothy/services/server/internal/authz"
)

// Bounds and defaults of a statistics window (StatsParams).
const (
	// DefaultStatsWindow is how far back a window reaches when Since is not
	// given.
	DefaultStatsWindow = 24 * time.Hour
	// DefaultStatsStep is an interval's length when Step is not given.
	DefaultStatsStep = time.Hour
	// MinStatsStep is the shortest interval.
	MinStatsStep = time.Minute
	// MaxStatsStep is the longest interval.
	MaxStatsStep = 24 * time.Hour
	// MaxStatsIntervals bounds the intervals of one window, so one request
	// answers a few hundred rows at most whatever it asks.
	MaxStatsIntervals = 500
	// MaxStatsWindow bounds how far apart Since and Until may be: attempts
	// older than the log's retention are pruned with their deliveries, so
	// a longer window shows nothing more.
	MaxStatsWindow = 90 * 24 * time.Hour
)

// StatsParams selects the window of Stats. Zero fields take their
// defaults: Until the end of the current interval (intervals are aligned
// to multiples of Step since the Unix epoch), Since DefaultStatsWindow
// before Until, Step DefaultStatsStep.
type StatsParams struct {
	SubscriptionID uuid.UUID
	// Since is the start of the first interval, included.
	Since time.Time
	// Until is the end of the last interval, excluded. The last interval
	// is shorter than Step when Until-Since is not a multiple of it.
	Until time.Time
	// Step is each interval's length, MinStatsStep to MaxStatsStep.
	Step time.Duration
}

// resolve fills in the defaults at now and checks the bounds, naming the
// field as the HTTP API's query spells it (ErrInvalid).
func (p *StatsParams) resolve(now time.Time) (StatsParams, error) {
	r := *p
	if r.Step == 0 {
		r.Step = DefaultStatsStep
	}
	if r.Step < MinStatsStep || r.Step > MaxStatsStep {
		return r, fmt.Errorf("%w: step: %s, want %s to %s", ErrInvalid, r.Step, MinStatsStep, MaxStatsStep)
	}
	if r.Step%time.Second != 0 {
		return r, fmt.Errorf("%w: step: %s, want whole seconds", ErrInvalid, r.Step)
	}
	if r.Until.IsZero() {
		r.Until = now.Truncate(r.Step).Add(r.Step)
	}
	if r.Since.IsZero() {
		r.Since = r.Until.Add(-DefaultStatsWindow)
	}
	switch window := r.Until.Sub(r.Since); {
	case window <= 0:
		return r, fmt.Errorf("%w: since: %s is not before until %s", ErrInvalid, r.Since.UTC().Format(time.RFC3339), r.Until.UTC().Format(time.RFC3339))
	case window > MaxStatsWindow:
		return r, fmt.Errorf("%w: since: the window from since to until is %s, at most %s", ErrInvalid, window, MaxStatsWindow)
	case intervals(window, r.Step) > MaxStatsIntervals:
		return r, fmt.Errorf("%w: step: %s makes %d intervals from since to until, at most %d; choose a longer step",
			ErrInvalid, r.Step, intervals(window, r.Step), MaxStatsIntervals)
	}
	return r, nil
}

// intervals is how many intervals of step cover window, the last one
// possibly short.
func intervals(window, step time.Duration) int64 {
	return int64((window + step - 1) / step)
}

// statsSQL computes the series of subscription $1 over [$2, $3) in $5
// intervals of $4 seconds, in one pass over the attempts of the window
// (the index webhook_attempts_subscription_time), each attempt put in its
// interval by arithmetic, and the intervals without attempts filled in by
// generate_series. ok: a 2xx answer, or, for a broker destination, its
// confirmation (no status and no error). failed: every other attempt, also a
// refusal before any request (no status, no duration), which is why the
// latency percentiles leave those out: they measure requests.
const statsSQL = `
WITH a AS (
    SELECT floor(extract(epoch FROM attempted_at - $2::timestamptz) / $4::float8)::int AS i,
           coalesce(status_code BETWEEN 200 AND 299,
               error IS NULL AND (SELECT destination_kind <> 'http' FROM webhook_subscriptions WHERE id = $1), false) AS ok,
           CASE WHEN status_code IS NOT NULL OR duration_seconds > 0 THEN duration_seconds END AS secs
    FROM webhook_attempts
    WHERE subscription_id = $1 AND attempted_at >= $2::timestamptz AND attempted_at < $3::timestamptz
), agg AS (
    SELECT i, count(*) FILTER (WHERE ok) AS ok, count(*) FILTER (WHERE NOT ok) AS failed,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY secs) AS p50,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY secs) AS p95
    FROM a GROUP BY i
)
SELECT g.i, coalesce(agg.ok, 0), coalesce(agg.failed, 0), agg.p50, agg.p95
FROM generate_series(0, $5::int - 1) AS g(i) LEFT JOIN agg ON agg.i = g.i
ORDER BY g.i`

// Stats returns the delivery statistics of one subscription over a
// window: per interval the attempts answered 2xx and the others, the
// median and 95th percentile latency of the requests, and the success
// rate. An attempt is one event's share of a request: a batched request
// counts once for each event it carried, as its attempts are listed. The
// caller has checked that the subject may read the subscription; a
// subscription that does not exist is ErrNotFound, a window out of bounds
// ErrInvalid naming the field.
func Stats(ctx context.Context, q authz.Querier, p *StatsParams) (*StatsView, error) {
	r, err := p.resolve(time.Now())
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_subscriptions WHERE id = $1)`, r.SubscriptionID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read webhook subscription %s: %w", r.SubscriptionID, err)
	}
	if !exists {
		return nil, fmt.Errorf("%s: %w", r.SubscriptionID, ErrNotFound)
	}
	n := intervals(r.Until.Sub(r.Since), r.Step)
	rows, err := q.Query(ctx, statsSQL, r.SubscriptionID, r.Since, r.Until, r.Step.Seconds(), n)
	if err != nil {
		return nil, fmt.Errorf("statistics of %s: %w", r.SubscriptionID, err)
	}
	v := &StatsView{SubscriptionID: r.SubscriptionID, Since: r.Since.UTC(), Until: r.Until.UTC(),
		StepSeconds: int64(r.Step / time.Second), Intervals: make([]StatsInterval, 0, n)}
	var i int64
	var it StatsInterval
	var p50, p95 *float64
	_, err = pgx.ForEachRow(rows, []any{&i, &it.OK, &it.Failed, &p50, &p95}, func() error {
		start := r.Since.Add(time.Duration(i) * r.Step)
		s := StatsInterval{Start: start.UTC(), End: minTime(start.Add(r.Step), r.Until).UTC(), OK: it.OK, Failed: it.Failed,
			LatencyP50Seconds: roundMillis(p50), LatencyP95Seconds: roundMillis(p95)}
		s.SuccessRate = rate(s.OK, s.Failed)
		v.Intervals = append(v.Intervals, s)
		v.OK += s.OK
		v.Failed += s.Failed
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("statistics of %s: %w", r.SubscriptionID, err)
	}
	v.SuccessRate = rate(v.OK, v.Failed)
	return v, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// rate is ok/(ok+failed), nil when there was no attempt.
func rate(ok, failed int64) *float64 {
	if ok+failed == 0 {
		return nil
	}
	r := float64(ok) / float64(ok+failed)
	return &r
}

// roundMillis rounds seconds to the millisecond, the precision a chart or
// a table shows; nil stays nil.
func roundMillis(s *float64) *float64 {
	if s == nil {
		return nil
	}
	r := math.Round(*s*1000) / 1000
	return &r
}
