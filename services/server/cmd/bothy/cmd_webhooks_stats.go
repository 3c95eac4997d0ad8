package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/bothy/bothy/services/server/internal/webhooks"
)

func init() {
	register(command{Name: "webhooks stats", Args: "SUBSCRIPTION_ID", Remote: true, Setup: setupWebhooksStats,
		Summary: "a subscription's attempts by interval: ok, failed, latency p50/p95, success rate"})
}

// statsQuery is the window of webhooks stats: the API's since, until
// (RFC 3339, once resolveTimes read what was typed) and step (a duration such as 15m, or seconds); empty
// for the server's defaults.
type statsQuery struct {
	Since, Until, Step string
}

func setupWebhooksStats(fs *pflag.FlagSet) func(context.Context, *call) error {
	q := &statsQuery{}
	fs.StringVar(&q.Since, "since", "", "start of the first interval: an RFC 3339 time, or a duration before now such as 6h (default: 24 hours before --until)")
	fs.StringVar(&q.Until, "until", "", "end of the last interval: an RFC 3339 time, or a duration before now (default: the end of the current interval)")
	fs.StringVar(&q.Step, "step", "", "each interval's length, such as 15m or 1h, or seconds (default 1h)")
	asJSON := jsonFlag(fs)
	return func(ctx context.Context, c *call) error {
		id, err := subscriptionID(c)
		if err != nil {
			return err
		}
		if err := resolveTimes(time.Now(), timeFlag{"--since", &q.Since}, timeFlag{"--until", &q.Until}); err != nil {
			return err
		}
		svc, done, err := c.webhooks(ctx)
		if err != nil {
			return err
		}
		defer done()
		v, err := svc.Stats(ctx, id, q)
		if err != nil {
			return err
		}
		if *asJSON {
			return c.printJSON(v)
		}
		return printStats(c, v)
	}
}

// printStats prints v as a table, one row per interval and a total.
func printStats(c *call, v *webhooks.StatsView) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START\tOK\tFAILED\tP50\tP95\tSUCCESS_RATE")
	for _, it := range v.Intervals {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", it.Start.UTC().Format(time.RFC3339), it.OK, it.Failed,
			latency(it.LatencyP50Seconds), latency(it.LatencyP95Seconds), successRate(it.SuccessRate))
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\t\t%s\n", v.OK, v.Failed, successRate(v.SuccessRate))
	return tw.Flush()
}

// latency prints a latency in seconds as a duration, "-" without requests.
func latency(secs *float64) string {
	if secs == nil {
		return "-"
	}
	return time.Duration(*secs * float64(time.Second)).Round(time.Millisecond).String()
}

// successRate prints a rate as a percentage, "-" without attempts.
func successRate(r *float64) string {
	if r == nil {
		return "-"
	}
	return strconv.FormatFloat(*r*100, 'f', 1, 64) + "%"
}

// params reads q as the API does, for the database: what the API refuses
// with a 400 is a usage error naming the flag here.
func (q *statsQuery) params() (*webhooks.StatsParams, error) {
	p := &webhooks.StatsParams{}
	for _, f := range []struct {
		name, v string
		to      *time.Time
	}{{"--since", q.Since, &p.Since}, {"--until", q.Until, &p.Until}} {
		if f.v == "" {
			continue
		}
		t, err := parseTime(f.name, f.v, time.Now())
		if err != nil {
			return nil, err
		}
		*f.to = t
	}
	if q.Step != "" {
		d, err := time.ParseDuration(q.Step)
		if n, nerr := strconv.ParseInt(q.Step, 10, 64); nerr == nil && n > 0 && n <= int64(webhooks.MaxStatsStep/time.Second) {
			d, err = time.Duration(n)*time.Second, nil
		}
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%w: --step %q: want a duration such as 15m or 1h, or a number of seconds", errUsage, q.Step)
		}
		p.Step = d
	}
	return p, nil
}

// statsError makes the window the database refused a usage error, as the
// API's 400 is.
func statsError(err error) error {
	if errors.Is(err, webhooks.ErrInvalid) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return err
}
